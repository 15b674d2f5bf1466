package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Identity is who a machine is: the SMBIOS UUID, the hostname and the
// Kubernetes Node name. An empty field is not known and is not compared.
type Identity struct {
	// UUID is the SMBIOS UUID (Talos's SystemInformation).
	UUID string
	// Hostname is the node's hostname (Talos's HostnameStatus), without a domain.
	Hostname string
	// NodeName is the Kubernetes Node name (Talos's Nodename).
	NodeName string
}

// MachineIdentity is the identity the controller recorded for m: the UUID
// discovery read, the hostname the spec sets, the Node name seen at its join.
func MachineIdentity(m *ichorv1alpha1.TalosMachine) Identity {
	return Identity{UUID: m.Spec.Identity.UUID, Hostname: m.Spec.Hostname, NodeName: m.Status.NodeName}
}

func (i Identity) empty() bool { return i.UUID == "" && i.Hostname == "" && i.NodeName == "" }

// String names the known fields, e.g. `SMBIOS UUID "…", hostname "cp-1", Node "cp-1"`.
func (i Identity) String() string {
	var parts []string

	if i.UUID != "" {
		parts = append(parts, fmt.Sprintf("SMBIOS UUID %q", i.UUID))
	}

	if i.Hostname != "" {
		parts = append(parts, fmt.Sprintf("hostname %q", i.Hostname))
	}

	if i.NodeName != "" {
		parts = append(parts, fmt.Sprintf("Node %q", i.NodeName))
	}

	if len(parts) == 0 {
		return "no recorded identity"
	}

	return strings.Join(parts, ", ")
}

// IdentityMismatchError says that the node at an address (or an etcd member)
// is not the machine the caller meant: nothing was sent to it.
type IdentityMismatchError struct {
	// Where names what answered: "the node at 192.0.2.10", "etcd member cp-2 (8e9e05c52164694d)".
	Where string
	// Want is the identity the caller recorded; Got is what the node reports.
	Want, Got Identity
	// Fields names the fields that differ ("SMBIOS UUID", "hostname", "Node name").
	Fields []string
}

func (e *IdentityMismatchError) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s cannot be shown to be the expected machine: the machine has %s to compare with what it reports (%s); nothing was sent",
			e.Where, e.Want, e.Got)
	}

	return fmt.Sprintf("%s is not the expected machine (%s differ): it reports %s, the machine is %s; nothing was sent",
		e.Where, strings.Join(e.Fields, ", "), e.Got, e.Want)
}

// Paused is the message of a machine paused for this mismatch: both
// identities, and how to go on. It names no step, so every reconciler that
// finds the same mismatch writes the same condition.
func (e *IdentityMismatchError) Paused(machine, address string) string {
	return e.Error() + ". The machine is paused: nothing is sent to its address while this condition stands. " +
		"Check which machine answers on " + address + " (a reused address or a swapped machine); the controller checks again " +
		"at each step and resumes once the node there is this machine. A machine that is gone for good is removed " +
		"without a reset by `ichor node remove " + machine + " --force`"
}

// AsIdentityMismatch returns the mismatch in err's chain, or nil.
func AsIdentityMismatch(err error) *IdentityMismatchError {
	var m *IdentityMismatchError
	if errors.As(err, &m) {
		return m
	}

	return nil
}

// Identity reads who the node is over the authenticated connection:
// SystemInformation's UUID, HostnameStatus's hostname and Nodename's Node
// name (t:internal/app/machined/pkg/controllers/hardware/system.go,
// network/hostname_spec.go, k8s/nodename.go). A resource the node does not
// have yet leaves its field empty.
func (n *Node) Identity(ctx context.Context) (Identity, error) {
	var id Identity

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, n.c.COSI, hardware.SystemInformationID)
	if err != nil && !state.IsNotFoundError(err) {
		return Identity{}, fmt.Errorf("read SystemInformation: %w", err)
	} else if err == nil {
		id.UUID = si.TypedSpec().UUID
	}

	hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, n.c.COSI, network.HostnameID)
	if err != nil && !state.IsNotFoundError(err) {
		return Identity{}, fmt.Errorf("read HostnameStatus: %w", err)
	} else if err == nil {
		id.Hostname = hs.TypedSpec().Hostname
	}

	nn, err := safe.StateGetByID[*k8s.Nodename](ctx, n.c.COSI, k8s.NodenameID)
	if err != nil && !state.IsNotFoundError(err) {
		return Identity{}, fmt.Errorf("read Nodename: %w", err)
	} else if err == nil {
		id.NodeName = nn.TypedSpec().Nodename
	}

	return id, nil
}

// Compare checks got against want: the UUID whenever want has one (a node
// that reports none is not the machine that had one), the hostname and Node
// name when both sides know them. Nothing compared is a mismatch too: an
// identity that cannot be checked is not trusted. address names the node in
// the error.
func Compare(address string, want, got Identity) error {
	where := "the node at " + address
	if want.empty() {
		return &IdentityMismatchError{Where: where, Want: want, Got: got}
	}

	var fields []string

	if want.UUID != "" && !strings.EqualFold(want.UUID, got.UUID) {
		fields = append(fields, "SMBIOS UUID")
	}

	if want.Hostname != "" && got.Hostname != "" && !strings.EqualFold(shortName(want.Hostname), shortName(got.Hostname)) {
		fields = append(fields, "hostname")
	}

	if want.NodeName != "" && got.NodeName != "" && !strings.EqualFold(want.NodeName, got.NodeName) {
		fields = append(fields, "Node name")
	}

	compared := want.UUID != "" || (want.Hostname != "" && got.Hostname != "") || (want.NodeName != "" && got.NodeName != "")
	if len(fields) > 0 || !compared {
		return &IdentityMismatchError{Where: where, Want: want, Got: got, Fields: fields}
	}

	return nil
}

// shortName is a hostname without its domain.
func shortName(h string) string {
	short, _, _ := strings.Cut(h, ".")

	return short
}

// VerifyIdentity checks that the node this connection reaches is the machine
// want describes, and returns the handle through which calls that change the
// node are made: a Node alone has no such method, so no caller can send one
// without this check. A mismatch is an *IdentityMismatchError naming both
// identities.
func (n *Node) VerifyIdentity(ctx context.Context, want Identity) (*Verified, error) {
	got, err := n.Identity(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the identity of the node at %s: %w", n.address, err)
	}

	if err := Compare(n.address, want, got); err != nil {
		return nil, err
	}

	return &Verified{Node: n, id: got}, nil
}

// Verified is a connection to a node whose identity was checked by
// VerifyIdentity. It has the calls that change the node. Closing it closes
// the Node.
type Verified struct {
	*Node

	id Identity
}

// Identity is what the node reported when it was verified.
func (v *Verified) Identity() Identity { return v.id }

// Apply applies cfg in mode, a dry run first; it returns the dry run's
// warnings. The dry run's mode details (a configuration diff, which may hold
// secrets) are never returned.
func (v *Verified) Apply(ctx context.Context, cfg []byte, mode machine.ApplyConfigurationRequest_Mode) ([]string, error) {
	dry, err := v.c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode, DryRun: true})
	if err != nil {
		return nil, fmt.Errorf("dry run: %w", err)
	}

	var warnings []string
	for _, m := range dry.GetMessages() {
		warnings = append(warnings, m.GetWarnings()...)
	}

	if _, err := v.c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode}); err != nil {
		return warnings, fmt.Errorf("apply: %w", err)
	}

	return warnings, nil
}

// RemoveEtcdMember removes, through this control plane, the etcd member of
// the machine of: the member's name (Talos names it after the hostname,
// t:internal/app/machined/pkg/system/services/etcd.go) must be that machine's
// hostname or Node name, so a member found at a reused address is not removed.
// An unknown member counts as removed (Talos answers NotFound).
func (v *Verified) RemoveEtcdMember(ctx context.Context, member EtcdMember, of Identity) error {
	if err := CompareMember(member, of); err != nil {
		return err
	}

	err := v.c.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: member.ID})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("remove etcd member %x: %w", member.ID, err)
	}

	return nil
}

// CompareMember checks that an etcd member is the machine of: its name
// (Talos names it after the hostname) is that machine's hostname or Node name.
// A machine with neither cannot be checked, which is a mismatch too.
func CompareMember(member EtcdMember, of Identity) error {
	mismatch := &IdentityMismatchError{
		Where: fmt.Sprintf("etcd member %s (%x)", member.Hostname, member.ID),
		Want:  Identity{Hostname: of.Hostname, NodeName: of.NodeName}, Got: Identity{Hostname: member.Hostname},
	}

	switch {
	case of.Hostname == "" && of.NodeName == "":
		return mismatch
	case !strings.EqualFold(shortName(member.Hostname), shortName(of.Hostname)) && !strings.EqualFold(member.Hostname, of.NodeName):
		mismatch.Fields = []string{"member name"}

		return mismatch
	}

	return nil
}

// Reset sends req. Talos answers at once and runs the reset afterwards.
func (v *Verified) Reset(ctx context.Context, req *machine.ResetRequest) error {
	if err := v.c.ResetGeneric(ctx, req); err != nil {
		return fmt.Errorf("reset: %w", err)
	}

	return nil
}

// Reboot asks the node to reboot. Talos answers at once and reboots
// afterwards; it neither cordons nor drains (unlike its Upgrade and Shutdown),
// so the caller does both first (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go, Reboot).
func (v *Verified) Reboot(ctx context.Context) error {
	if err := v.c.Reboot(ctx); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}

	return nil
}

// Shutdown asks the node to power off. Talos answers at once and runs its
// shutdown sequence afterwards, which cordons and drains the node itself; the
// boot sequence uncordons it again at the next power-on
// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go,
// Shutdown and Boot). force skips that cordon and drain (machinery's
// ShutdownRequest.Force: "whether node should shutdown without first
// cordening and draining"), as a cluster shutdown's control planes need once
// the workers are off.
func (v *Verified) Shutdown(ctx context.Context, force bool) error {
	if err := v.c.Shutdown(ctx, talosclient.WithShutdownForce(force)); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}

	return nil
}
