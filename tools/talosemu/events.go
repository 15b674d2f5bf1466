package talosemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/xid"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The runtime event stream of a machine (MachineService/Events), as machined keeps it: a ring
// of 1000 events of which 990 can be replayed (t:internal/app/machined/pkg/runtime/v1alpha1/
// v1alpha1_controller.go NewEvents(1000, 10), …/v1alpha1_events.go), each with an xid ID, a
// type URL `talos/runtime/<message>` and the actor ID of the request that caused it
// (t:internal/app/machined/pkg/runtime/events.go NewEvent, ToMachineEvent). The stream lives
// in machined's memory: a boot starts an empty one.
const (
	eventsCapacity = 1000
	eventsGap      = 10
)

type event struct {
	id      xid.ID
	payload proto.Message
	actor   string
}

func (e event) proto() (*machine.Event, error) {
	typeURL := ""
	if e.payload != nil {
		typeURL = "talos/runtime/" + string(e.payload.ProtoReflect().Descriptor().FullName())
	}

	var value []byte

	if e.payload != nil {
		var err error

		value, err = proto.Marshal(e.payload)
		if err != nil {
			return nil, err
		}
	}

	return &machine.Event{Data: &anypb.Any{TypeUrl: typeURL, Value: value}, Id: e.id.String(), ActorId: e.actor}, nil
}

type eventStream struct {
	mu     sync.Mutex
	ring   []event
	write  int64
	notify chan struct{} // closed and replaced at each publish
}

func newEventStream() *eventStream {
	return &eventStream{ring: make([]event, eventsCapacity), notify: make(chan struct{})}
}

func (s *eventStream) publish(payload proto.Message, actor string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.ring[s.write%eventsCapacity] = event{id: xid.New(), payload: payload, actor: actor}
	s.write++

	close(s.notify)
	s.notify = make(chan struct{})
}

type watchOptions struct {
	tailEvents   int
	tailID       xid.ID
	tailDuration time.Duration
	actor        string
}

// start returns the first position a watcher reads (…/v1alpha1_events.go Watch).
func (s *eventStream) start(o watchOptions) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()

	pos := s.write
	minPos := max(s.write-int64(eventsCapacity-eventsGap), 0)

	at := func(i int) event { return s.ring[(minPos+int64(i))%eventsCapacity] }

	switch {
	case o.tailEvents < 0:
		pos = minPos
	case o.tailEvents > 0:
		pos = max(pos-int64(o.tailEvents), minPos)
	case !o.tailID.IsNil():
		pos = minPos + int64(sort.Search(int(pos-minPos), func(i int) bool { return at(i).id.Compare(o.tailID) > 0 }))
	case o.tailDuration != 0:
		since := time.Now().Add(-o.tailDuration)
		pos = minPos + int64(sort.Search(int(pos-minPos), func(i int) bool { return at(i).id.Time().After(since) }))
	}

	return pos
}

// next waits for the event at pos; false when ctx ends or the watcher fell a whole ring
// behind (Talos ends the stream then too).
func (s *eventStream) next(ctx context.Context, pos int64) (event, bool) {
	for {
		s.mu.Lock()
		if pos < s.write {
			if s.write-pos >= eventsCapacity {
				s.mu.Unlock()

				return event{}, false
			}

			ev := s.ring[pos%eventsCapacity]
			s.mu.Unlock()

			return ev, true
		}

		ch := s.notify
		s.mu.Unlock()

		select {
		case <-ctx.Done():
			return event{}, false
		case <-ch:
		}
	}
}

func (m *Machine) eventStream() *eventStream {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.events == nil {
		m.events = newEventStream()
	}

	return m.events
}

// publish adds an event to the machine's stream.
func (m *Machine) publish(payload proto.Message, actor string) {
	m.eventStream().publish(payload, actor)
}

// publishStage mirrors the MachineStatusEvent machined publishes on each MachineStatus change
// (t:internal/app/machined/pkg/controllers/runtime/machine_status_publisher.go).
func (m *Machine) publishStage(stage runtime.MachineStage, ready bool, unmet []runtime.UnmetCondition) {
	ev := &machine.MachineStatusEvent{
		Stage:  machine.MachineStatusEvent_MachineStage(stage), //nolint:gosec // the stages are small and numbered alike
		Status: &machine.MachineStatusEvent_MachineStatus{Ready: ready},
	}

	for _, c := range unmet {
		ev.Status.UnmetConditions = append(ev.Status.UnmetConditions, &machine.MachineStatusEvent_MachineStatus_UnmetCondition{Name: c.Name, Reason: c.Reason})
	}

	m.publish(ev, "")
}

// publishSequence mirrors the controller's SequenceEvent (t:…/v1alpha1_controller.go run).
func (m *Machine) publishSequence(seq string, action machine.SequenceEvent_Action, actor string) {
	m.publish(&machine.SequenceEvent{Sequence: seq, Action: action}, actor)
}

// publishTask mirrors the controller's TaskEvent around a task (…/v1alpha1_controller.go).
func (m *Machine) publishTask(task string, action machine.TaskEvent_Action, actor string) {
	m.publish(&machine.TaskEvent{Task: task, Action: action}, actor)
}

// publishServices mirrors the ServiceStateEvents service runners publish on state changes
// (t:internal/app/machined/pkg/system/service_runner.go, events/events.go AsProto).
func (m *Machine) publishServices(action machine.ServiceStateEvent_Action, message string, actor string) {
	for _, svc := range m.services() {
		if action == machine.ServiceStateEvent_RUNNING && svc.state != stateRunning {
			continue
		}

		m.publish(&machine.ServiceStateEvent{
			Service: svc.id,
			Action:  action,
			Message: message,
			Health:  &machine.ServiceHealth{Unknown: svc.healthUnknown, Healthy: svc.healthy},
		}, actor)
	}
}

// setActor records the actor ID of the lifecycle request being run, for the events its
// sequence publishes.
func (m *Machine) setActor(actor string) {
	m.mu.Lock()
	m.actor = actor
	m.mu.Unlock()
}

func (m *Machine) currentActor() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.actor
}

// Events follows t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Events:
// an empty hello event first, then the options (tail_events, tail_id, tail_seconds are
// exclusive; t:…/runtime/events.go With* options), then past events and new ones as they come.
func (s *apiServer) Events(in *machine.EventsRequest, srv grpc.ServerStreamingServer[machine.Event]) error {
	hello, err := event{id: xid.New(), actor: in.GetWithActorId()}.proto()
	if err != nil {
		return err
	}

	if err := srv.Send(hello); err != nil {
		return err
	}

	var o watchOptions

	set := 0

	if in.GetTailEvents() != 0 {
		o.tailEvents = int(in.GetTailEvents())
		set++
	}

	if in.GetTailId() != "" {
		id, err := xid.FromString(in.GetTailId())
		if err != nil {
			return fmt.Errorf("error parsing tail_id: %w", err)
		}

		if set > 0 {
			return errors.New("WithTailID can't be specified at the same time with WithTailEvents or WithTailDuration")
		}

		o.tailID = id
		set++
	}

	if in.GetTailSeconds() != 0 {
		if set > 0 {
			return errors.New("WithTailDuration can't be specified at the same time with WithTailEvents or WithTailID")
		}

		o.tailDuration = time.Duration(in.GetTailSeconds()) * time.Second
	}

	o.actor = in.GetWithActorId()

	stream := s.m.eventStream()
	ctx := srv.Context()

	for pos := stream.start(o); ; pos++ {
		ev, ok := stream.next(ctx, pos)
		if !ok {
			return ctx.Err()
		}

		if o.actor != "" && ev.actor != o.actor {
			continue
		}

		msg, err := ev.proto()
		if err != nil {
			return err
		}

		if err := srv.Send(msg); err != nil {
			return err
		}
	}
}

// Read serves the few files clients read from a node: talosctl reads the boot ID to tell a
// reboot happened (t:cmd/talosctl/pkg/talos/action/tracker.go getBootID). Other paths fail as
// a missing file does on Talos (the open error, code Unknown).
func (s *apiServer) Read(in *machine.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	m := s.m

	m.mu.Lock()
	bootID, hostname := m.p.BootID, m.hostnameLocked()
	version, _ := m.runningVersionLocked()
	m.mu.Unlock()

	var content string

	switch in.GetPath() {
	case "/proc/sys/kernel/random/boot_id":
		content = bootID + "\n"
	case "/etc/hostname", "/proc/sys/kernel/hostname":
		content = hostname + "\n"
	case "/etc/os-release":
		content = fmt.Sprintf("NAME=\"Talos\"\nID=talos\nVERSION_ID=%s\nPRETTY_NAME=\"Talos (%s)\"\n", version, version)
	default:
		return status.Errorf(codes.Unknown, "open %s: no such file or directory", in.GetPath())
	}

	r := strings.NewReader(content)
	buf := make([]byte, 4096)

	for {
		n, err := r.Read(buf)
		if n > 0 {
			if err := srv.Send(&common.Data{Bytes: append([]byte(nil), buf[:n]...)}); err != nil {
				return err
			}
		}

		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// ImageList lists the images in a containerd namespace (t:…/v1alpha1_server.go ImageList):
// the system namespace holds the kubelet image and, on control planes, etcd's; the CRI
// namespace the control plane's static pod images. The list comes from the running config.
func (s *apiServer) ImageList(in *machine.ImageListRequest, srv grpc.ServerStreamingServer[machine.ImageListResponse]) error {
	m := s.m

	m.mu.Lock()
	cfg, boot := m.active, m.bootedAt
	m.mu.Unlock()

	var images []string

	if in.GetNamespace() == common.ContainerdNamespace_NS_UNKNOWN {
		return status.Error(codes.InvalidArgument, "namespace is required")
	}

	if cfg != nil && cfg.Machine() != nil {
		cp := cfg.Machine().Type().IsControlPlane()

		add := func(img interface{ Image() string }) {
			if img != nil && !isNil(img) {
				images = append(images, img.Image())
			}
		}

		switch in.GetNamespace() {
		case common.ContainerdNamespace_NS_SYSTEM:
			add(cfg.K8sKubeletConfig())

			if cp && cfg.Cluster() != nil {
				add(cfg.Cluster().Etcd())
			}
		case common.ContainerdNamespace_NS_CRI:
			if cp {
				add(cfg.K8sAPIServerConfig())
				add(cfg.K8sControllerManagerConfig())
				add(cfg.K8sSchedulerConfig())
			}

			add(cfg.K8sProxyConfig())
		}
	}

	sort.Strings(images)

	for _, img := range images {
		if img == "" {
			continue
		}

		if err := srv.Send(&machine.ImageListResponse{
			Name:      img,
			Digest:    "sha256:" + seed(img, "digest")[:64],
			Size:      int64(20<<20 + len(img)*4096),
			CreatedAt: timestamppb.New(boot),
		}); err != nil {
			return err
		}
	}

	return nil
}

// isNil tells a typed nil inside an interface (config accessors return those for absent
// documents).
func isNil(v any) bool {
	rv := reflect.ValueOf(v)

	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
