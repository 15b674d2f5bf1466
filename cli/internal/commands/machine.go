package commands

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/approval"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

func machineCommand() *cli.Command {
	return &cli.Command{
		Name:   "machine",
		Usage:  "list, inspect, approve and reject machines",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the machines of the namespace",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagCluster, Usage: "only the machines of TalosCluster `NAME`"},
					&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "keep printing machines as they change"},
				},
				Action: machineList,
			},
			{
				Name:          cmdGet,
				Usage:         "show one machine: identity, approval, hardware and conditions",
				ArgsUsage:     argMachine,
				ShellComplete: completeMachines,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "then print a line each time the machine changes"},
				},
				Action: machineGet,
			},
			{
				Name:          "approve",
				Usage:         "approve a discovered machine with its role, labels, disks and network",
				ArgsUsage:     argMachine,
				ShellComplete: completeMachines,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagRole, Usage: "`ROLE`: controlplane or worker (required)"},
					&cli.StringSliceFlag{Name: "label", Usage: "node label `KEY=VALUE` (repeatable)"},
					&cli.StringFlag{Name: "hostname", Usage: "node `HOSTNAME` (default: Talos's)"},
					&cli.StringFlag{Name: "install-disk", Usage: "system disk `SELECTOR`: " + selectorSyntax + " (default: the only discovered disk, keyed on its most stable attribute)"},
					&cli.BoolFlag{Name: "confirm-wipe", Usage: "confirm that the install disk may be wiped although it holds partitions"},
					&cli.StringSliceFlag{Name: "disk", Usage: "disk role `SPEC`: ROLE=SELECTOR[,volume=NAME][,maxSize=SIZE][,confirmWipe], ROLE ephemeral or userVolume (repeatable)"},
					&cli.StringFlag{Name: "nic", Usage: "permanent `MAC` of the primary NIC"},
					&cli.BoolFlag{Name: "dhcp", Usage: "take the address from DHCP"},
					&cli.StringSliceFlag{Name: "address", Usage: "static address `CIDR` (repeatable)"},
					&cli.StringFlag{Name: "gateway", Usage: "default gateway `IP` of a static configuration"},
					&cli.StringSliceFlag{Name: "nameserver", Usage: "DNS server `IP` (repeatable)"},
					&cli.IntFlag{Name: "vlan", Usage: "VLAN `ID` on the primary NIC"},
				},
				Action: machineApprove,
			},
			{
				Name:          "reject",
				Usage:         "reject a discovered machine: it is not configured",
				ArgsUsage:     argMachine,
				ShellComplete: completeMachines,
				Action:        machineReject,
			},
			reclaimCommand(),
		},
	}
}

// completeMachines offers the machine names of the namespace.
func completeMachines(ctx context.Context, cmd *cli.Command) {
	r, err := connected(cmd)
	if err != nil {
		return
	}
	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return
	}
	for _, m := range list.Items {
		_, _ = fmt.Fprintln(r.out, m.Name)
	}
}

func machineTable() *output.Rows {
	return &output.Rows{Header: []string{colName, "CLUSTER", "ROLE", "APPROVAL", colStage, colAddress, "READY", colAge}}
}

func machineRow(m *ichorv1alpha1.TalosMachine, now time.Time) []string {
	ready := ""
	if c := meta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
		ready = string(c.Status)
		// Why not, in the summary's words (SummarizeTalosMachine).
		if c.Status != metav1.ConditionTrue && c.Reason != "" {
			ready += " (" + c.Reason + ")"
		}
	}
	return []string{m.Name, m.Spec.ClusterName, m.Spec.Role, m.Spec.Approval.State, m.Status.Stage, m.Spec.Address, ready,
		output.Age(m.CreationTimestamp.Time, now)}
}

func machineList(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}
	cluster := cmd.String(flagCluster)
	keep := func(m *ichorv1alpha1.TalosMachine) bool { return cluster == "" || m.Spec.ClusterName == cluster }
	items := make([]ichorv1alpha1.TalosMachine, 0, len(list.Items))
	for i := range list.Items {
		if keep(&list.Items[i]) {
			items = append(items, list.Items[i])
		}
	}
	table := machineTable()
	switch {
	case r.format == output.Table:
		now := time.Now()
		for i := range items {
			table.Add(machineRow(&items[i], now)...)
		}
		if len(items) == 0 && !cmd.Bool("watch") {
			r.printf("No machines in namespace %s%s.\n", r.ns(), clusterSuffix(cluster))
			return nil
		}
		if err := table.Write(r.out); err != nil {
			return err
		}
	case cmd.Bool("watch"):
		for i := range items {
			if err := r.printEvent(watch.Added, &items[i]); err != nil {
				return err
			}
		}
	default:
		for i := range items {
			items[i].ManagedFields = nil
		}
		return output.Object(r.out, r.format, &ichorv1alpha1.TalosMachineList{TypeMeta: metav1.TypeMeta{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosMachineList"}, Items: items})
	}
	if !cmd.Bool("watch") {
		return nil
	}
	return r.watchMachines(ctx, list.ResourceVersion, table, keep)
}

func clusterSuffix(cluster string) string {
	if cluster == "" {
		return ""
	}
	return " for cluster " + cluster
}

// watchMachines prints each change after resourceVersion until the context ends.
func (r *run) watchMachines(ctx context.Context, resourceVersion string, table *output.Rows, keep func(*ichorv1alpha1.TalosMachine) bool) error {
	for {
		w, err := r.c().Watch(ctx, &ichorv1alpha1.TalosMachineList{}, &client.ListOptions{
			Namespace: r.ns(),
			Raw:       &metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true},
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the person ended the watch
			}
			return r.conn.Explain(err, "watching TalosMachines in namespace "+r.ns())
		}
		resourceVersion, err = r.printEvents(ctx, w, resourceVersion, table, keep)
		w.Stop()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the person ended the watch
		}
	}
}

func (r *run) printEvents(ctx context.Context, w watch.Interface, rv string, table *output.Rows, keep func(*ichorv1alpha1.TalosMachine) bool) (string, error) {
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				// The resource version is too old: start again from now.
				werr := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(werr) || apierrors.IsGone(werr) {
					return "", nil
				}
				return rv, r.conn.Explain(werr, "watching TalosMachines")
			}
			m, ok := ev.Object.(*ichorv1alpha1.TalosMachine)
			if !ok {
				continue
			}
			rv = m.ResourceVersion
			if ev.Type == watch.Bookmark || !keep(m) {
				continue
			}
			if r.format != output.Table {
				if err := r.printEvent(ev.Type, m); err != nil {
					return rv, err
				}
				continue
			}
			row := machineRow(m, time.Now())
			if ev.Type == watch.Deleted {
				row[4] = "deleted"
			}
			r.printf("%s\n", table.Line(row))
		}
	}
}

// printEvent prints one watch event as YAML or JSON.
func (r *run) printEvent(t watch.EventType, m *ichorv1alpha1.TalosMachine) error {
	m.ManagedFields = nil
	if r.format == output.YAML {
		r.printf("---\n")
	}
	return output.Object(r.out, r.format, struct {
		Type   watch.EventType             `json:"type"`
		Object *ichorv1alpha1.TalosMachine `json:"object"`
	}{t, m})
}

// getMachine reads a machine; when it does not exist, the error lists those that do.
func (r *run) getMachine(ctx context.Context, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, m)
	if err == nil {
		return m, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, r.conn.Explain(err, fmt.Sprintf("reading TalosMachine %s/%s", r.ns(), name))
	}
	list := &ichorv1alpha1.TalosMachineList{}
	if lerr := r.c().List(ctx, list, client.InNamespace(r.ns())); lerr != nil {
		return nil, r.conn.Explain(lerr, "listing TalosMachines in namespace "+r.ns())
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("TalosMachine %q not found: namespace %s has no machines; is the namespace right (-n NAMESPACE)?", name, r.ns())
	}
	names := make([]string, 0, len(list.Items))
	for _, m := range list.Items {
		names = append(names, m.Name)
	}
	return nil, fmt.Errorf("TalosMachine %q not found in namespace %s; the machines there are: %s (`ichor machine list`)", name, r.ns(), strings.Join(names, ", "))
}

func machineGet(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	m, err := r.getMachine(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	keep := func(o *ichorv1alpha1.TalosMachine) bool { return o.Name == m.Name }
	if r.format != output.Table {
		rv := m.ResourceVersion
		m.ManagedFields = nil
		m.APIVersion, m.Kind = ichorv1alpha1.GroupVersion.String(), "TalosMachine"
		if err := output.Object(r.out, r.format, m); err != nil || !cmd.Bool("watch") {
			return err
		}
		return r.watchMachines(ctx, rv, nil, keep)
	}
	if err := r.printMachine(m, time.Now()); err != nil || !cmd.Bool("watch") {
		return err
	}
	table := machineTable()
	table.Add(machineRow(m, time.Now())...)
	r.printf("\nChanges (Ctrl-C stops):\n")
	if err := table.Write(r.out); err != nil {
		return err
	}
	return r.watchMachines(ctx, m.ResourceVersion, table, keep)
}

func (r *run) printMachine(m *ichorv1alpha1.TalosMachine, now time.Time) error {
	b := &output.Block{}
	b.Add("Name", m.Name)
	b.Add("Namespace", m.Namespace)
	b.Add("Cluster", m.Spec.ClusterName)
	b.Add("Address", m.Spec.Address)
	approval := m.Spec.Approval.State
	if m.Spec.Approval.DecidedBy != "" {
		approval += " by " + m.Spec.Approval.DecidedBy
	}
	if m.Spec.Approval.DecidedAt != nil {
		approval += " at " + m.Spec.Approval.DecidedAt.UTC().Format(time.RFC3339)
	}
	b.Add("Approval", approval)
	b.Add("Role", m.Spec.Role)
	b.Add("Hostname", m.Spec.Hostname)
	b.Add("Labels", formatMap(m.Spec.Labels))
	install := ""
	if m.Spec.Install.Disk != nil {
		install = m.Spec.Install.Disk.String()
	}
	b.Add("Install disk", install)
	b.Add("UUID", m.Spec.Identity.UUID)
	b.Add("Serial", m.Spec.Identity.Serial)
	b.Add("MACs", strings.Join(m.Spec.Identity.MACAddresses, ", "))
	b.Add("Hardware", strings.TrimSpace(m.Status.Hardware.Manufacturer+" "+m.Status.Hardware.ProductName))
	b.Add("Stage", m.Status.Stage)
	b.Add("Node", m.Status.NodeName)
	b.Add("Talos", m.Status.TalosVersion)
	b.Add("Age", output.Age(m.CreationTimestamp.Time, now))
	if err := b.Write(r.out); err != nil {
		return err
	}
	if len(m.Status.Hardware.Disks) > 0 {
		r.printf("\nDisks:\n")
		t := &output.Rows{Header: []string{"DEVICE", "SIZE", "KEY", "PARTITIONS", "ROLE"}}
		for _, d := range m.Status.Hardware.Disks {
			sel, stable := d.StableSelector()
			key := sel.String()
			if !stable {
				key += " (nothing stable to key on)"
			}
			parts := "no"
			if d.HasPartitions {
				parts = wordYes
			}
			t.Add(d.DevicePath, output.Bytes(d.SizeBytes), key, parts, diskRoleOf(m, d))
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	if len(m.Status.Hardware.Links) > 0 {
		r.printf("\nLinks:\n")
		t := &output.Rows{Header: []string{colName, "MAC", "ADDRESSES"}}
		for _, l := range m.Status.Hardware.Links {
			t.Add(l.Name, l.PermanentMAC, strings.Join(l.Addresses, ", "))
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	if len(m.Status.Conditions) > 0 {
		r.printf("\nConditions:\n")
		t := &output.Rows{Header: []string{"TYPE", "STATUS", "REASON", "MESSAGE"}}
		for _, c := range m.Status.Conditions {
			t.Add(c.Type, string(c.Status), c.Reason, c.Message)
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	return nil
}

func diskRoleOf(m *ichorv1alpha1.TalosMachine, d ichorv1alpha1.DiscoveredDisk) string {
	if m.Spec.Install.Disk != nil && m.Spec.Install.Disk.Matches(d) {
		return ichorv1alpha1.DiskRoleSystem
	}
	for _, dr := range m.Spec.Disks {
		if dr.Disk.Matches(d) {
			if dr.VolumeName != "" {
				return dr.Role + " " + dr.VolumeName
			}
			return dr.Role
		}
	}
	return ""
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// machineFacts gathers what the shared machine checks of contracts/pkg/guard
// need with the loader the admission webhook uses.
func (r *run) machineFacts(ctx context.Context, m *ichorv1alpha1.TalosMachine) (guard.MachineFacts, error) {
	facts, err := guard.LoadMachineFacts(ctx, r.c(), m)
	if err != nil {
		return facts, r.conn.Explain(err, "reading TalosCluster "+m.Spec.ClusterName+" and its TalosMachines")
	}
	return facts, nil
}

func refusalError(what string, refusals []guard.Refusal) error {
	if len(refusals) == 0 {
		return nil
	}
	lines := make([]string, 0, len(refusals))
	for _, rf := range refusals {
		lines = append(lines, "  "+rf.Error())
	}
	return fmt.Errorf("%s is refused; nothing was changed:\n%s", what, strings.Join(lines, "\n"))
}

// decide writes an approval decision and the fields that go with it in one
// update; a conflict is retried on a fresh read.
func (r *run) decide(ctx context.Context, name, state string, mutate func(m *ichorv1alpha1.TalosMachine) error) (*ichorv1alpha1.TalosMachine, error) {
	user, err := r.conn.WhoAmI(ctx)
	if err != nil {
		return nil, err
	}
	// Read once for the friendly not-found message; the shared write reads again.
	if _, err := r.getMachine(ctx, name); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s %s", verbOf(state), name)
	m, err := approval.Decide(ctx, r.c(), client.ObjectKey{Namespace: r.ns(), Name: name}, state, user, time.Now(), r.machineFacts, mutate)
	var refused *approval.Refused
	switch {
	case err == nil:
		return m, nil
	case errors.As(err, &refused):
		return nil, refusalError(what, refused.Refusals)
	case errors.Is(err, approval.ErrBeingRemoved):
		return nil, fmt.Errorf("TalosMachine %s is being removed; wait until it reappears as pending (`ichor machine list --watch`)", name)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil, r.conn.Explain(err, what)
	}
	return nil, err
}

func verbOf(state string) string {
	if state == ichorv1alpha1.ApprovalRejected {
		return "rejecting"
	}
	return "approving"
}

func machineApprove(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	role := cmd.String(flagRole)
	if role != ichorv1alpha1.RoleControlPlane && role != ichorv1alpha1.RoleWorker {
		return fmt.Errorf("--role is required: controlplane or worker (got %q)", role)
	}
	labels, err := parseLabels(cmd.StringSlice("label"))
	if err != nil {
		return err
	}
	var installSel *ichorv1alpha1.DiskSelector
	if s := cmd.String("install-disk"); s != "" {
		sel, err := parseDiskSelector(s)
		if err != nil {
			return fmt.Errorf("--install-disk: %w", err)
		}
		installSel = &sel
	}
	var diskRoles []ichorv1alpha1.DiskRole
	for _, s := range cmd.StringSlice("disk") {
		dr, err := parseDiskRole(s)
		if err != nil {
			return err
		}
		diskRoles = append(diskRoles, dr)
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	var notes []string
	m, err := r.decide(ctx, name, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) error {
		notes = notes[:0]
		if m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved {
			return fmt.Errorf("TalosMachine %s is already approved (by %s); to change its role, remove it (`ichor node remove %s`) and approve it again",
				name, orUnknown(m.Spec.Approval.DecidedBy), name)
		}
		disks := m.Status.Hardware.Disks
		network, err := parseNetwork(cmd.String("nic"), cmd.Bool("dhcp"), cmd.StringSlice("address"), cmd.String("gateway"),
			cmd.StringSlice("nameserver"), cmd.Int("vlan"), m.Status.Hardware.Links)
		if err != nil {
			return err
		}
		for _, dr := range diskRoles {
			if _, err := approval.Find(dr.Disk, disks); err != nil {
				return fmt.Errorf("--disk %s: %w", dr.Disk.String(), err)
			}
		}
		install, note, err := approval.ChooseInstallDisk(installSel, disks, diskRoles, diskFields)
		if err != nil {
			return err
		}
		if err := approval.CheckWipes(install, cmd.Bool("confirm-wipe"), diskRoles, disks, diskFields); err != nil {
			return err
		}
		if note != "" {
			notes = append(notes, note)
		}
		m.Spec.Role = role
		if labels != nil {
			m.Spec.Labels = labels
		}
		if h := cmd.String("hostname"); h != "" {
			m.Spec.Hostname = h
		}
		m.Spec.Install.Disk = install
		m.Spec.Install.ConfirmWipe = cmd.Bool("confirm-wipe")
		if diskRoles != nil {
			m.Spec.Disks = diskRoles
		}
		m.Spec.Network = network
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range notes {
		_, _ = fmt.Fprintln(r.errOut, n)
	}
	if r.format != output.Table {
		m.ManagedFields = nil
		return output.Object(r.out, r.format, m)
	}
	r.printf("machine %s approved as %s by %s; follow it with `ichor machine get %s` or `ichor machine list --watch`\n",
		m.Name, m.Spec.Role, m.Spec.Approval.DecidedBy, m.Name)
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func machineReject(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	m, err := r.decide(ctx, name, ichorv1alpha1.ApprovalRejected, func(m *ichorv1alpha1.TalosMachine) error {
		switch m.Spec.Approval.State {
		case ichorv1alpha1.ApprovalRejected:
			return fmt.Errorf("TalosMachine %s is already rejected (by %s)", name, orUnknown(m.Spec.Approval.DecidedBy))
		case ichorv1alpha1.ApprovalApproved:
			return fmt.Errorf("TalosMachine %s is approved; to take it out of the cluster, run `ichor node remove %s`", name, name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if r.format != output.Table {
		m.ManagedFields = nil
		return output.Object(r.out, r.format, m)
	}
	r.printf("machine %s rejected by %s\n", m.Name, m.Spec.Approval.DecidedBy)
	return nil
}
