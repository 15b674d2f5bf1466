package talosemu_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// collectEvents reads events (after the hello) until stop returns true or the deadline.
func collectEvents(t *testing.T, cl *client.Client, ctx context.Context, stop func([]client.Event) bool, opts ...client.EventsOptionFunc) []client.Event {
	t.Helper()

	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	ch := make(chan client.EventResult)
	if err := cl.EventsWatchV2(ctx, ch, opts...); err != nil {
		t.Fatalf("EventsWatchV2: %v", err)
	}

	var got []client.Event

	for {
		if stop(got) {
			return got
		}

		select {
		case r := <-ch:
			if r.Error != nil {
				t.Fatalf("events: %v (after %d events)", r.Error, len(got))
			}

			got = append(got, r.Event)
		case <-ctx.Done():
			t.Fatalf("events: deadline after %d events: %v", len(got), describe(got))
		}
	}
}

func describe(evs []client.Event) string {
	var b strings.Builder

	for _, e := range evs {
		b.WriteString(e.TypeURL + "{" + strings.TrimSpace(e.Payload.(interface{ String() string }).String()) + "} ")
	}

	return b.String()
}

func has(evs []client.Event, match func(client.Event) bool) bool {
	for _, e := range evs {
		if match(e) {
			return true
		}
	}

	return false
}

func runningReady(e client.Event) bool {
	ms, ok := e.Payload.(*machineapi.MachineStatusEvent)

	return ok && ms.GetStage() == machineapi.MachineStatusEvent_RUNNING && ms.GetStatus().GetReady()
}

func readBootID(t *testing.T, cl *client.Client, ctx context.Context) string {
	t.Helper()

	r, err := cl.Read(ctx, "/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() //nolint:errcheck

	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Read boot_id: %v", err)
	}

	return strings.TrimSpace(string(b))
}

// TestEvents checks MachineService/Events (t:…/v1alpha1_server.go Events, …/v1alpha1_events.go
// Watch), Read of the boot ID and ImageList: what talosctl's --wait trackers rely on
// (t:cmd/talosctl/pkg/talos/action/tracker.go, node.go).
func TestEvents(t *testing.T) {
	spec := testSpec(1)
	w := startWorld(t, spec, "")
	c := getCluster(t)
	m := w.Machines()[0]

	provision(t, c, m, c.controlPlane)

	admin := c.admin(t, m.IP())
	ctx := t.Context()

	// the history of this boot: boot sequence, stages, services
	all := collectEvents(t, admin, ctx, func(e []client.Event) bool { return has(e, runningReady) }, client.WithTailEvents(-1))

	if !has(all, func(e client.Event) bool {
		s, ok := e.Payload.(*machineapi.ServiceStateEvent)

		return ok && s.GetService() == "apid" && s.GetAction() == machineapi.ServiceStateEvent_RUNNING
	}) {
		t.Errorf("no apid Running event in the boot's history: %s", describe(all))
	}

	if len(all) < 3 {
		t.Fatalf("history too short: %s", describe(all))
	}

	// tail_events N replays the last N; tail_id replays what came after that event
	last2 := collectEvents(t, admin, ctx, func(e []client.Event) bool { return len(e) >= 2 }, client.WithTailEvents(2))
	if last2[0].ID == all[0].ID {
		t.Errorf("tail_events 2 replayed from the start of the boot: %s", describe(last2))
	}

	after := collectEvents(t, admin, ctx, func(e []client.Event) bool { return len(e) >= 1 }, client.WithTailID(all[len(all)-2].ID))
	if after[0].ID != all[len(all)-1].ID {
		t.Errorf("tail_id %s: first event %s, want the next one %s", all[len(all)-2].ID, after[0].ID, all[len(all)-1].ID)
	}

	// exclusive options fail after the hello event, as on Talos
	stream, err := admin.Events(ctx, client.WithTailEvents(1), client.WithTailID(all[0].ID))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := stream.Recv(); err != nil {
		t.Fatalf("hello event: %v", err)
	}

	_, err = stream.Recv()
	wantCode(t, err, codes.Unknown, "WithTailID can't be specified at the same time")

	// Read: the boot ID, which only a reboot changes; readers may not read
	bootID := readBootID(t, admin, ctx)
	if len(bootID) != 36 {
		t.Fatalf("boot ID %q", bootID)
	}

	rd, err := c.clientWithRoles(t, m.IP(), role.Reader).Read(ctx, "/proc/sys/kernel/random/boot_id")
	if err == nil {
		_, err = io.ReadAll(rd)
	}

	wantCode(t, err, codes.PermissionDenied, "not authorized")

	// ImageList: the system namespace holds kubelet and etcd on a control plane
	images, err := admin.ImageList(ctx, common.ContainerdNamespace_NS_SYSTEM) //nolint:staticcheck // MachineService/ImageList is the RPC under test
	if err != nil {
		t.Fatal(err)
	}

	var names []string

	for {
		img, err := images.Recv()
		if err != nil {
			break
		}

		names = append(names, img.GetName())
	}

	if len(names) != 2 || !strings.Contains(strings.Join(names, " "), "kubelet") || !strings.Contains(strings.Join(names, " "), "etcd") {
		t.Errorf("system images = %v, want kubelet and etcd", names)
	}

	// a reboot: the sequence event carries the actor of the request; stopAllServices follows;
	// the next boot has a fresh stream and a new boot ID
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	ch := make(chan client.EventResult)
	if err := admin.EventsWatchV2(watchCtx, ch); err != nil {
		t.Fatal(err)
	}

	resp, err := admin.MachineClient.Reboot(ctx, &machineapi.RebootRequest{})
	if err != nil {
		t.Fatal(err)
	}

	actor := resp.GetMessages()[0].GetActorId()

	var seen []client.Event

	for !has(seen, func(e client.Event) bool {
		task, ok := e.Payload.(*machineapi.TaskEvent)

		return ok && task.GetTask() == "stopAllServices" && e.ActorID == actor
	}) {
		select {
		case r := <-ch:
			if r.Error != nil {
				t.Fatalf("events during reboot: %v (seen %s)", r.Error, describe(seen))
			}

			seen = append(seen, r.Event)
		case <-time.After(10 * time.Second):
			t.Fatalf("no stopAllServices event of actor %s: %s", actor, describe(seen))
		}
	}

	if !has(seen, func(e client.Event) bool {
		s, ok := e.Payload.(*machineapi.SequenceEvent)

		return ok && s.GetSequence() == "reboot" && e.ActorID == actor
	}) {
		t.Errorf("no reboot sequence event with the actor: %s", describe(seen))
	}

	cancel()

	testenv.EventuallyOK(t, 20*time.Second, "rebooted", func() (bool, string) {
		cl, err := c.adminFactory(m.IP())()
		if err != nil {
			return false, err.Error()
		}
		defer cl.Close() //nolint:errcheck

		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()

		r, err := cl.Read(cctx, "/proc/sys/kernel/random/boot_id")
		if err != nil {
			return false, err.Error()
		}
		defer r.Close() //nolint:errcheck

		b, err := io.ReadAll(r)
		if err != nil {
			return false, err.Error()
		}

		return strings.TrimSpace(string(b)) != bootID, "same boot ID"
	})

	waitStage(t, c.adminFactory(m.IP()), runtime.MachineStageRunning)

	fresh := collectEvents(t, c.admin(t, m.IP()), ctx, func(e []client.Event) bool { return has(e, runningReady) }, client.WithTailEvents(-1))
	if s, ok := fresh[0].Payload.(*machineapi.SequenceEvent); !ok || s.GetSequence() != "boot" || s.GetAction() != machineapi.SequenceEvent_START {
		t.Errorf("the new boot's stream starts with %s, want the boot sequence start", describe(fresh[:1]))
	}

	if has(fresh, func(e client.Event) bool { return e.ActorID == actor }) {
		t.Error("the new boot's stream holds the previous boot's events")
	}
}
