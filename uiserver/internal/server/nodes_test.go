package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/nodes"
)

func nodeClient(t testing.TB, tok string) ichorv1.NodeServiceClient {
	return ichorv1.NewNodeServiceClient(grpcConn(t, tok))
}

func TestNodeServicesAViewerMayRead(t *testing.T) {
	resp, err := nodeClient(t, viewer(t)).GetNodeServices(context.Background(), &ichorv1.GetNodeServicesRequest{Name: nodeName})
	if err != nil {
		t.Fatalf("viewer GetNodeServices: %v", err)
	}

	ids := make([]string, 0, len(resp.GetServices()))
	for _, s := range resp.GetServices() {
		ids = append(ids, s.GetId())
	}

	for _, want := range []string{"apid", "etcd", "kubelet", "machined", "trustd"} {
		if !slices.Contains(ids, want) {
			t.Fatalf("services %v, want %s among them", ids, want)
		}
	}

	if !slices.IsSorted(ids) {
		t.Errorf("services not in id order: %v", ids)
	}

	for _, s := range resp.GetServices() {
		if s.GetId() == "apid" && (s.GetState() != "Running" || !s.GetHealthy() || s.GetLastEventTime() == nil) {
			t.Errorf("apid: %v", s)
		}
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/nodes/"+nodeName+"/services", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), `"kubelet"`) {
		t.Fatalf("REST services: %d %v", code, body)
	}
}

func TestNodeDisksAndLinks(t *testing.T) {
	c := nodeClient(t, viewer(t))

	disks, err := c.GetNodeDisks(context.Background(), &ichorv1.GetNodeDisksRequest{Name: nodeName})
	if err != nil {
		t.Fatal(err)
	}

	if len(disks.GetDisks()) == 0 {
		t.Fatal("no disks")
	}

	d := disks.GetDisks()[0]
	if d.GetDevicePath() != "/dev/nvme0n1" || d.GetSizeBytes() <= 0 || d.GetTransport() != "nvme" || d.GetWwid() == "" || !strings.HasPrefix(d.GetById(), "/dev/disk/by-id/") {
		t.Fatalf("disk: %v", d)
	}

	links, err := c.GetNodeLinks(context.Background(), &ichorv1.GetNodeLinksRequest{Name: nodeName})
	if err != nil {
		t.Fatal(err)
	}

	var l *ichorv1.NodeLink

	for _, x := range links.GetLinks() {
		if x.GetName() == "enp0s1" {
			l = x
		}
	}

	if l == nil {
		t.Fatalf("no link enp0s1 in %v", links.GetLinks())
	}

	// The approved MAC became the alias net0 (LinkAliasConfig), and the
	// machine's address is on the link.
	if l.GetKind() != "physical" || l.GetPermanentAddr() != nodeMAC || l.GetOperationalState() != "up" || l.GetMtu() != 1500 ||
		!slices.Contains(l.GetAliases(), "net0") || !slices.Contains(l.GetAddresses(), nodeAddr+"/24") {
		t.Fatalf("link: %v", l)
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/nodes/"+nodeName+"/links", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), nodeMAC) {
		t.Fatalf("REST links: %d %v", code, body)
	}

	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/nodes/"+nodeName+"/disks", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), "/dev/nvme0n1") {
		t.Fatalf("REST disks: %d %v", code, body)
	}
}

func TestNodeDmesg(t *testing.T) {
	resp, err := nodeClient(t, viewer(t)).GetNodeDmesg(context.Background(), &ichorv1.GetNodeDmesgRequest{Name: nodeName, TailLines: 3})
	if err != nil {
		t.Fatal(err)
	}

	if len(resp.GetLines()) != 3 {
		t.Fatalf("tail 3: %q", resp.GetLines())
	}

	all, err := nodeClient(t, viewer(t)).GetNodeDmesg(context.Background(), &ichorv1.GetNodeDmesgRequest{Name: nodeName})
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(all.GetLines()[0], "Linux version") || !strings.Contains(strings.Join(all.GetLines(), "\n"), "enp0s1") {
		t.Fatalf("dmesg: %q", all.GetLines()[:min(3, len(all.GetLines()))])
	}

	_, err = nodeClient(t, viewer(t)).GetNodeDmesg(context.Background(), &ichorv1.GetNodeDmesgRequest{Name: nodeName, TailLines: 9999})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("tail 9999: %v, want InvalidArgument", err)
	}
}

func TestNodeEtcdMembers(t *testing.T) {
	c := nodeClient(t, viewer(t))

	var resp *ichorv1.GetNodeEtcdMembersResponse

	deadline := time.Now().Add(60 * time.Second)

	for {
		var err error

		resp, err = c.GetNodeEtcdMembers(context.Background(), &ichorv1.GetNodeEtcdMembersRequest{Name: nodeName})
		if err == nil && len(resp.GetMembers()) == 1 {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("etcd members: %v %v", resp, err)
		}

		time.Sleep(200 * time.Millisecond)
	}

	m := resp.GetMembers()[0]
	if m.GetId() == "" || m.GetHostname() == "" || len(m.GetPeerUrls()) == 0 || m.GetLearner() {
		t.Fatalf("member: %v", m)
	}
}

// recvLines reads n lines of a log stream.
func recvLines(t *testing.T, stream ichorv1.NodeService_StreamNodeLogsClient, n int) []*ichorv1.StreamNodeLogsResponse {
	t.Helper()

	var out []*ichorv1.StreamNodeLogsResponse

	for len(out) < n {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d lines: %v", len(out), err)
		}

		out = append(out, msg)
	}

	return out
}

func TestNodeLogsTailFollowAndResume(t *testing.T) {
	c := nodeClient(t, viewer(t))
	ctx := context.Background()

	// tail, no follow: exactly the last lines, each with a time and a token
	stream, err := c.StreamNodeLogs(ctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "apid", TailLines: 3})
	if err != nil {
		t.Fatal(err)
	}

	tail := recvLines(t, stream, 3)
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("a fourth line or an error after tail 3: %v", err)
	}

	for _, l := range tail {
		if l.GetTime() == nil || l.GetResumeToken() == "" || !strings.Contains(l.GetLine(), "apid") {
			t.Fatalf("line %v", l)
		}
	}

	// follow: the tail, then new lines
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	stream, err = c.StreamNodeLogs(fctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "apid", TailLines: 1, Follow: true})
	if err != nil {
		t.Fatal(err)
	}

	seen := recvLines(t, stream, 3)
	cancel()

	if seen[0].GetLine() != tail[2].GetLine() && !seen[0].GetTime().AsTime().After(tail[2].GetTime().AsTime()) {
		t.Fatalf("follow started with %q, before the last tailed line %q", seen[0].GetLine(), tail[2].GetLine())
	}

	for i := 1; i < len(seen); i++ {
		if !seen[i].GetTime().AsTime().After(seen[i-1].GetTime().AsTime()) {
			t.Fatalf("followed lines out of order: %q then %q", seen[i-1].GetLine(), seen[i].GetLine())
		}
	}

	// resume from the second line seen: the next line is the third, nothing before it
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()

	stream, err = c.StreamNodeLogs(rctx, &ichorv1.StreamNodeLogsRequest{
		Name: nodeName, Service: "apid", Follow: true, ResumeToken: seen[1].GetResumeToken(),
	})
	if err != nil {
		t.Fatal(err)
	}

	resumed := recvLines(t, stream, 2)
	if resumed[0].GetLine() != seen[2].GetLine() {
		t.Fatalf("resumed with %q, want the line after the token's: %q", resumed[0].GetLine(), seen[2].GetLine())
	}

	if !resumed[1].GetTime().AsTime().After(resumed[0].GetTime().AsTime()) {
		t.Fatalf("resumed lines out of order: %v", resumed)
	}

	// a token this server did not issue
	stream, err = c.StreamNodeLogs(ctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "apid", ResumeToken: "nonsense!"})
	if err == nil {
		_, err = stream.Recv()
	}

	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad token: %v, want InvalidArgument", err)
	}
}

func TestNodeKernelLogFollowAndResume(t *testing.T) {
	c := nodeClient(t, viewer(t))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := c.StreamNodeLogs(ctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "kernel", TailLines: 2, Follow: true})
	if err != nil {
		t.Fatal(err)
	}

	seen := recvLines(t, stream, 4)
	cancel()

	lines := map[string]bool{}
	for _, l := range seen {
		if lines[l.GetLine()] {
			t.Fatalf("line %q sent twice", l.GetLine())
		}

		lines[l.GetLine()] = true
	}

	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()

	stream, err = c.StreamNodeLogs(rctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "kernel", Follow: true, ResumeToken: seen[2].GetResumeToken()})
	if err != nil {
		t.Fatal(err)
	}

	if got := recvLines(t, stream, 1)[0]; got.GetLine() != seen[3].GetLine() {
		t.Fatalf("resumed with %q, want %q", got.GetLine(), seen[3].GetLine())
	}
}

func TestNodeLogsOverREST(t *testing.T) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, baseURL+"/api/v1/nodes/"+nodeName+"/services/machined/logs?tail_lines=2", nil)
	if err != nil {
		t.Fatal(err)
	}

	req.Header.Set("Authorization", "Bearer "+viewer(t))

	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck

	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("REST logs: %d %s", resp.StatusCode, b)
	}

	var got []string

	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var msg struct {
			Result struct {
				Line        string `json:"line"`
				ResumeToken string `json:"resumeToken"`
			} `json:"result"`
		}

		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}

		if msg.Result.ResumeToken == "" {
			t.Fatalf("line without a resume token: %s", sc.Text())
		}

		got = append(got, msg.Result.Line)
	}

	if len(got) != 2 || !strings.Contains(got[1], "machined") {
		t.Fatalf("REST logs: %q", got)
	}
}

func TestNodeReadsRefusedWithoutGetOnTheCluster(t *testing.T) {
	nobody := token(t, "ichor:nobody")

	_, err := nodeClient(t, nobody).GetNodeServices(context.Background(), &ichorv1.GetNodeServicesRequest{Name: nodeName})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "ichor:nobody") || !strings.Contains(err.Error(), "talosclusters") {
		t.Fatalf("no get on talosclusters: %v, want PermissionDenied naming the user and the resource", err)
	}

	stream, err := nodeClient(t, nobody).StreamNodeLogs(context.Background(), &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "apid"})
	if err == nil {
		_, err = stream.Recv()
	}

	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("logs without get on talosclusters: %v", err)
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/nodes/"+nodeName+"/disks", nobody, "")
	if code != http.StatusForbidden {
		t.Fatalf("REST disks without get: %d %v, want 403", code, body)
	}
}

func TestNodeNotRunningAndUnreachable(t *testing.T) {
	maint := createMachine(t, "node-maint", ichorv1alpha1.ApprovalPending, "")
	t.Cleanup(func() { _ = admin.Delete(context.Background(), maint) })

	_, err := nodeClient(t, viewer(t)).GetNodeServices(context.Background(), &ichorv1.GetNodeServicesRequest{Name: "node-maint"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("a machine in maintenance: %v, want FailedPrecondition saying it is not running", err)
	}

	// rejected, so that it counts for no guard check of the other tests
	m := createMachine(t, "node-down", ichorv1alpha1.ApprovalRejected, ichorv1alpha1.RoleWorker)
	t.Cleanup(func() { _ = admin.Delete(context.Background(), m) })
	m.Spec.Address = downAddress

	if err := admin.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}

	m.Status.Stage = ichorv1alpha1.StageRunning
	if err := admin.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}

	waitCached(t, "node-down", m.ResourceVersion)

	_, err = nodeClient(t, viewer(t)).GetNodeDisks(context.Background(), &ichorv1.GetNodeDisksRequest{Name: "node-down"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), downAddress) {
		t.Fatalf("an unreachable node: %v, want Unavailable naming its address", err)
	}

	_, err = nodeClient(t, viewer(t)).GetNodeEtcdMembers(context.Background(), &ichorv1.GetNodeEtcdMembersRequest{Name: "node-down"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("etcd members of a worker: %v, want FailedPrecondition", err)
	}

	_, err = nodeClient(t, viewer(t)).GetNodeServices(context.Background(), &ichorv1.GetNodeServicesRequest{Name: "no-such-machine"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown machine: %v, want NotFound", err)
	}
}

// The backend's credential: one request for many callers, a public key only,
// and nothing secret in the access log.
func TestNodeCredentialIsSharedAndHoldsNoPrivateKey(t *testing.T) {
	ctx := context.Background()
	cred := &nodes.Credentials{Client: backendClient, Namespace: testNS, ClusterName: testCluster}

	before := readerRequests(t)

	var wg sync.WaitGroup

	errs := make(chan error, 10)
	certs := make(chan *nodes.Issued, 10)

	for range 10 {
		wg.Go(func() {
			c, err := cred.Get(ctx)
			errs <- err
			certs <- c
		})
	}

	wg.Wait()
	close(errs)
	close(certs)

	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var first *nodes.Issued

	for c := range certs {
		if first == nil {
			first = c
		} else if c != first {
			t.Fatal("concurrent callers got different certificates")
		}
	}

	after := readerRequests(t)
	if len(after)-len(before) != 1 {
		t.Fatalf("10 concurrent callers made %d requests, want 1", len(after)-len(before))
	}

	for _, r := range after {
		all := toJSON(r)
		if strings.Contains(all, "PRIVATE KEY") || !strings.Contains(r.Spec.PublicKey, "PUBLIC KEY") || r.Spec.Purpose != ichorv1alpha1.PurposeReader {
			t.Fatalf("request %s: %s", r.Name, all)
		}

		if r.Status.Role != "os:reader" {
			t.Fatalf("request %s signed for %q", r.Name, r.Status.Role)
		}
	}

	// node reads went through the server: nothing secret in its access log
	if _, err := nodeClient(t, viewer(t)).GetNodeServices(ctx, &ichorv1.GetNodeServicesRequest{Name: nodeName}); err != nil {
		t.Fatal(err)
	}

	logText := logBuf.String()
	for _, secret := range []string{"PRIVATE KEY", "BEGIN CERTIFICATE", string(nodeBun.Certs.OS.Key)} {
		if strings.Contains(logText, secret) {
			t.Fatalf("the access log holds %q", secret)
		}
	}

	if !strings.Contains(logText, "/api/v1/nodes/") && !strings.Contains(logText, "NodeService") {
		t.Fatalf("the access log shows no node read: the check above proves nothing")
	}
}

func TestNodeCredentialIsRenewed(t *testing.T) {
	ctx := context.Background()
	cred := &nodes.Credentials{Client: backendClient, Namespace: testNS, ClusterName: testCluster, Duration: 30 * time.Second}

	first, err := cred.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}

	life := time.Until(first.ExpiresAt())
	if life > 31*time.Second || life < 20*time.Second {
		t.Fatalf("a 30 s credential lasts %s", life)
	}

	// Past two thirds of its life the next call renews it; the superseded request goes.
	deadline := time.Now().Add(60 * time.Second)

	for {
		next, err := cred.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}

		if next != first {
			if next.Request == first.Request || !next.ExpiresAt().After(first.ExpiresAt()) {
				t.Fatalf("renewed to %s (%s), first %s (%s)", next.Request, next.ExpiresAt(), first.Request, first.ExpiresAt())
			}

			if time.Now().Before(first.ExpiresAt().Add(-20 * time.Second)) {
				t.Fatalf("renewed before two thirds of the lifetime")
			}

			break
		}

		if time.Now().After(deadline) {
			t.Fatal("not renewed")
		}

		time.Sleep(500 * time.Millisecond)
	}

	eventuallyGone(t, first.Request)
}

func eventuallyGone(t *testing.T, name string) {
	t.Helper()

	deadline := time.Now().Add(30 * time.Second)

	for {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, &ichorv1alpha1.TalosCredentialRequest{})
		if err != nil && strings.Contains(err.Error(), "not found") {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("the superseded request %s is still there: %v", name, err)
		}

		time.Sleep(100 * time.Millisecond)
	}
}

func readerRequests(t *testing.T) []ichorv1alpha1.TalosCredentialRequest {
	t.Helper()

	list := &ichorv1alpha1.TalosCredentialRequestList{}
	if err := admin.List(context.Background(), list, client.InNamespace(testNS), client.MatchingLabels{nodes.LabelManagedBy: "ichor-ui"}); err != nil {
		t.Fatal(err)
	}

	return list.Items
}
