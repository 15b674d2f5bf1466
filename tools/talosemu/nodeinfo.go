package talosemu

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	networkpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/network"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	talosconfigconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	talosproto "github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The inspection reads of a node: ServiceList, Logs, Dmesg, and the network status
// resources (AddressStatus, LinkStatus aliases). Logs and the kernel log are a pure
// function of the boot time and the clock, so two reads agree on the lines they share and
// a reader that reconnects sees the same lines again.

const (
	// logStartLines are the lines a service logs when it starts, 100 ms apart.
	logStartLines = 12
	// logHeartbeat is how often a running service logs a line after its start lines.
	logHeartbeat = time.Second
	// logKeep is how many lines a log keeps: Talos's service logs are ring buffers.
	logKeep = 2000
	// kernelTick is how often the kernel log gets a line after boot.
	kernelTick = time.Second
	// followPoll is how often a follow stream looks for new lines.
	followPoll = 200 * time.Millisecond
)

// stateRunning is a running service's state.
const stateRunning = "Running"

// serviceState is one service of the node as ServiceList reports it.
type serviceState struct {
	id, state string
	// health: unknown when the service has no health check
	healthUnknown, healthy bool
	message                string
}

// services lists the node's services the way a Talos node runs them: in maintenance only the
// base services; once configured also containerd, cri, kubelet, and on control planes etcd
// and trustd (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go
// StartAllServices). etcd's state is etcdServiceState's.
func (m *Machine) services() []serviceState {
	m.mu.Lock()
	maintenance := m.inMaintenanceLocked()
	m.mu.Unlock()

	running := func(id string, health bool) serviceState {
		s := serviceState{id: id, state: stateRunning, healthUnknown: !health, healthy: health}
		if health {
			s.message = "Health check successful"
		}

		return s
	}

	out := []serviceState{
		running("apid", true), running("auditd", false), running("dashboard", false),
		running("machined", false), running("syslogd", false), running("udevd", true),
	}

	if maintenance {
		return out
	}

	out = append(out, running("containerd", true), running("cri", true), running("kubelet", true))

	if m.isControlPlane() {
		out = append(out, m.etcdServiceState(), running("trustd", true))
	}

	slices.SortFunc(out, func(a, b serviceState) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}

		return 0
	})

	return out
}

func (m *Machine) bootTime() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.bootedAt.IsZero() {
		return time.Now().UTC()
	}

	return m.bootedAt
}

// ServiceList follows t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// ServiceList: one message with every service's state, events and health
// (t:internal/app/machined/pkg/system/service_runner.go AsProto).
func (s *apiServer) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	m := s.m
	boot := m.bootTime()

	list := &machine.ServiceList{}

	for i, svc := range m.services() {
		start := boot.Add(time.Duration(i) * 50 * time.Millisecond)

		events := []*machine.ServiceEvent{
			{Msg: "Starting service", State: "Starting", Ts: timestamppb.New(start)},
		}

		if svc.state == stateRunning {
			events = append(events, &machine.ServiceEvent{Msg: "Service started as goroutine", State: stateRunning, Ts: timestamppb.New(start.Add(10 * time.Millisecond))})
		} else {
			events = append(events, &machine.ServiceEvent{Msg: svc.message, State: svc.state, Ts: timestamppb.New(start.Add(10 * time.Millisecond))})
		}

		health := &machine.ServiceHealth{Unknown: svc.healthUnknown, Healthy: svc.healthy, LastMessage: svc.message}
		if !svc.healthUnknown {
			health.LastChange = timestamppb.New(start.Add(time.Second))
			events = append(events, &machine.ServiceEvent{Msg: svc.message, State: svc.state, Ts: health.LastChange})
		}

		list.Services = append(list.Services, &machine.ServiceInfo{
			Id: svc.id, State: svc.state, Events: &machine.ServiceEvents{Events: events}, Health: health,
		})
	}

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{list}}, nil
}

// logLines is a log that grows with time: the lines with index in [from, n(now)).
type logLines struct {
	count func(now time.Time) int
	line  func(i int) string
}

// window returns the indexes of the last tail lines (tail < 0: every line kept).
func (l logLines) window(now time.Time, tail int) (int, int) {
	n := l.count(now)
	from := max(0, n-logKeep)

	if tail >= 0 && n-tail > from {
		from = n - tail
	}

	return from, n
}

// stream sends the window, then, with follow, every new line until the client goes away.
func (l logLines) stream(ctx context.Context, tail int, follow bool, send func(string) error) error {
	from, n := l.window(time.Now(), tail)

	for i := from; i < n; i++ {
		if err := send(l.line(i)); err != nil {
			return err
		}
	}

	if !follow {
		return nil
	}

	t := time.NewTicker(followPoll)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}

		next := l.count(time.Now())
		for i := max(n, next-logKeep); i < next; i++ {
			if err := send(l.line(i)); err != nil {
				return err
			}
		}

		n = next
	}
}

// serviceLog is the log of a service this boot: its start lines, then a heartbeat every second.
// A service the node does not run has an empty log.
func (m *Machine) serviceLog(id string) logLines {
	boot := m.bootTime()

	known := slices.ContainsFunc(m.services(), func(s serviceState) bool { return s.id == id })
	if !known {
		return logLines{count: func(time.Time) int { return 0 }, line: func(int) string { return "" }}
	}

	m.mu.Lock()
	version, _ := m.runningVersionLocked()
	m.mu.Unlock()

	beatsFrom := boot.Add(logStartLines * 100 * time.Millisecond)

	return logLines{
		count: func(now time.Time) int {
			n := logStartLines
			if now.After(beatsFrom) {
				n += int(now.Sub(beatsFrom)/logHeartbeat) + 1
			}

			return n
		},
		line: func(i int) string {
			if i < logStartLines {
				at := boot.Add(time.Duration(i) * 100 * time.Millisecond).Format(time.RFC3339Nano)

				switch i {
				case 0:
					return fmt.Sprintf("%s [talos] %s: service starting", at, id)
				case 1:
					return fmt.Sprintf("%s [talos] %s: talos version %s", at, id, version)
				case 2:
					return fmt.Sprintf("%s [talos] service[%s](Running): Health check successful", at, id)
				default:
					return fmt.Sprintf("%s [talos] %s: ready (%d)", at, id, i-2)
				}
			}

			k := i - logStartLines
			at := beatsFrom.Add(time.Duration(k) * logHeartbeat).Format(time.RFC3339Nano)

			return fmt.Sprintf("%s [talos] %s: heartbeat %d", at, id, k+1)
		},
	}
}

// kernelLog is the kernel ring buffer this boot in Talos's Dmesg format
// "facility: priority: [time]: message" (talos-api.md §1, Dmesg), a tick every second.
func (m *Machine) kernelLog() logLines {
	boot := m.bootTime()

	m.mu.Lock()
	version, _ := m.runningVersionLocked()
	hw := m.p.Hardware
	m.mu.Unlock()

	stamp := func(d time.Duration) string { return boot.Add(d).Format(time.RFC3339Nano) }

	static := make([]string, 0, 3+len(hw.Disks)+len(hw.Links))
	static = append(static,
		fmt.Sprintf("kern:  notice: [%s]: Linux version %s (talosemu) #1 SMP", stamp(0), constants.DefaultKernelVersion),
		fmt.Sprintf("kern:    info: [%s]: DMI: %s %s, BIOS talosemu-1", stamp(10*time.Millisecond), hw.Manufacturer, hw.ProductName),
	)

	for i, d := range hw.Disks {
		static = append(static, fmt.Sprintf("kern:    info: [%s]: %s: %d 512-byte logical blocks", stamp(time.Duration(20+i)*time.Millisecond), d.Name, d.Size/512))
	}

	for i, l := range hw.Links {
		static = append(static, fmt.Sprintf("kern:    info: [%s]: virtio_net %s: renamed from eth%d, permanent address %s", stamp(time.Duration(100+i)*time.Millisecond), l.Name, i, l.MAC))
	}

	static = append(static, fmt.Sprintf("user: warning: [%s]: [talos] talosemu booted Talos %s", stamp(200*time.Millisecond), version))
	ticksFrom := boot.Add(time.Second)

	return logLines{
		count: func(now time.Time) int {
			n := len(static)
			if now.After(ticksFrom) {
				n += int(now.Sub(ticksFrom)/kernelTick) + 1
			}

			return n
		},
		line: func(i int) string {
			if i < len(static) {
				return static[i]
			}

			k := i - len(static)

			return fmt.Sprintf("kern:    info: [%s]: talosemu: tick %d", ticksFrom.Add(time.Duration(k)*kernelTick).Format(time.RFC3339Nano), k+1)
		},
	}
}

// Logs streams a service's log (t:…/v1alpha1_server.go Logs): the last tail_lines lines
// (a negative value: all of them, WithTailLines only when TailLines >= 0), then, with follow,
// new lines as they are logged.
func (s *apiServer) Logs(in *machine.LogsRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	id := in.GetId()
	if id == "" {
		return status.Error(codes.InvalidArgument, "log id is required")
	}

	return s.m.serviceLog(id).stream(srv.Context(), int(in.GetTailLines()), in.GetFollow(), func(l string) error {
		return srv.Send(&common.Data{Bytes: []byte(l + "\n")})
	})
}

// Dmesg streams the kernel log; follow keeps the stream open for new lines.
func (s *apiServer) Dmesg(in *machine.DmesgRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	return s.m.kernelLog().stream(srv.Context(), -1, in.GetFollow(), func(l string) error {
		return srv.Send(&common.Data{Bytes: []byte(l + "\n")})
	})
}

// setNetworkStatus writes what Talos's network controllers derive for the links: the
// machine's address on its first link (AddressStatus, ID "<link>/<prefix>",
// m:resources/network/network.go AddressID) plus an IPv6 link-local address per link, and
// each physical link's alias from the running config's LinkAliasConfig documents, whose
// selector is evaluated over the LinkStatus spec in celenv.LinkLocator
// (t:internal/app/machined/pkg/controllers/network/link_alias_spec.go sets the alias on the
// link, which LinkStatus then reports).
func (m *Machine) setNetworkStatus(ctx context.Context) error {
	m.mu.Lock()
	hw := m.p.Hardware
	active := m.active
	m.mu.Unlock()

	want := map[resource.ID]network.AddressStatusSpec{}

	aliases, err := linkAliases(ctx, m.st, active)
	if err != nil {
		return err
	}

	for i, l := range hw.Links {
		ls, err := safe.StateGetByID[*network.LinkStatus](ctx, m.st, l.Name)
		if err != nil {
			return err
		}

		if i == 0 {
			if ip, err := netip.ParseAddr(hw.Address); err == nil {
				p := netip.PrefixFrom(ip, 24)
				want[network.AddressID(l.Name, p)] = network.AddressStatusSpec{
					Address: p, Local: ip, LinkIndex: ls.TypedSpec().Index, LinkName: l.Name,
					Family: nethelpers.FamilyInet4, Scope: nethelpers.ScopeGlobal, Flags: nethelpers.AddressFlags(0x80), // permanent
					Priority: 1024,
				}
			}
		}

		mac := ls.TypedSpec().PermanentAddr
		if len(mac) == 6 {
			ll := netip.AddrFrom16([16]byte{
				0xfe, 0x80, 0, 0, 0, 0, 0, 0,
				mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5],
			})
			p := netip.PrefixFrom(ll, 64)
			want[network.AddressID(l.Name, p)] = network.AddressStatusSpec{
				Address: p, Local: ll, LinkIndex: ls.TypedSpec().Index, LinkName: l.Name,
				Family: nethelpers.FamilyInet6, Scope: nethelpers.ScopeLink, Flags: nethelpers.AddressFlags(0x80),
				Priority: 256,
			}
		}

		alias := aliases[l.Name]
		if ls.TypedSpec().Alias != alias {
			if err := put(ctx, m.st, network.NewLinkStatus(network.NamespaceName, l.Name), func(r *network.LinkStatus) {
				*r.TypedSpec() = *ls.TypedSpec()
				r.TypedSpec().Alias = alias
			}); err != nil {
				return err
			}
		}
	}

	existing, err := safe.StateListAll[*network.AddressStatus](ctx, m.st)
	if err != nil {
		return err
	}

	for a := range existing.All() {
		if _, ok := want[a.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, m.st, a.Metadata()); err != nil {
				return err
			}
		}
	}

	for id, spec := range want {
		if err := put(ctx, m.st, network.NewAddressStatus(network.NamespaceName, id), func(r *network.AddressStatus) {
			*r.TypedSpec() = spec
		}); err != nil {
			return err
		}
	}

	indexes := map[string]uint32{}

	for _, l := range hw.Links {
		if ls, err := safe.StateGetByID[*network.LinkStatus](ctx, m.st, l.Name); err == nil {
			indexes[l.Name] = ls.TypedSpec().Index
		}
	}

	ip, _ := netip.ParseAddr(hw.Address) // an invalid address has no routes

	return setRoutes(ctx, m.st, ip, hw.Links, indexes)
}

// linkAliases evaluates the config's LinkAliasConfig documents over the physical links as
// t:internal/app/machined/pkg/controllers/network/link_alias_config.go does: links sorted by
// permanent MAC, documents by name, the selector evaluated over the link's protobuf spec in
// celenv.LinkLocator; a fixed name needs exactly one match, a pattern ("net%d") numbers its
// matches; a link keeps the first alias it gets.
func linkAliases(ctx context.Context, st state.State, cfg talosconfig.Provider) (map[string]string, error) {
	out := map[string]string{}
	if cfg == nil {
		return out, nil
	}

	links, err := safe.StateListAll[*network.LinkStatus](ctx, st)
	if err != nil {
		return nil, err
	}

	physical := slices.DeleteFunc(slices.Collect(links.All()), func(l *network.LinkStatus) bool { return !l.TypedSpec().Physical() })
	slices.SortFunc(physical, func(a, b *network.LinkStatus) int {
		return bytes.Compare(a.TypedSpec().PermanentAddr, b.TypedSpec().PermanentAddr)
	})

	specs := make([]*networkpb.LinkStatusSpec, 0, len(physical))

	for _, l := range physical {
		var spec networkpb.LinkStatusSpec
		if err := talosproto.ResourceSpecToProto(l, &spec); err != nil {
			return nil, fmt.Errorf("link %s: %w", l.Metadata().ID(), err)
		}

		specs = append(specs, &spec)
	}

	docs := cfg.NetworkLinkAliasConfigs()
	slices.SortFunc(docs, func(a, b talosconfigconfig.NetworkLinkAliasConfig) int { return strings.Compare(a.Name(), b.Name()) })

	for _, doc := range docs {
		var matched []string

		for i, spec := range specs {
			ok, err := doc.LinkSelector().EvalBool(celenv.LinkLocator(), map[string]any{"link": spec})
			if err != nil {
				return nil, fmt.Errorf("LinkAliasConfig %s: %w", doc.Name(), err)
			}

			if ok {
				matched = append(matched, physical[i].Metadata().ID())
			}
		}

		if len(matched) > 1 && !doc.IsPatternAlias() {
			continue
		}

		matched = slices.DeleteFunc(matched, func(id string) bool { _, done := out[id]; return done })

		for i, id := range matched {
			if doc.IsPatternAlias() {
				out[id] = strings.Replace(doc.Name(), "%d", strconv.Itoa(i), 1)
			} else if i == 0 {
				out[id] = doc.Name()
			}
		}
	}

	return out, nil
}
