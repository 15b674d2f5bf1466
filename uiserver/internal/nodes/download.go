package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// Downloads serves the three admin-gated downloads of one node (architecture,
// "Trust"): a support bundle, an etcd snapshot and a packet capture, as
// plain HTTP GETs whose answer is the file itself, streamed as the node
// sends it:
//
//	GET /api/v1/nodes/{name}/support-bundle   (application/gzip, a tar.gz)
//	GET /api/v1/nodes/{name}/etcd-snapshot    (a control plane's etcd snapshot)
//	GET /api/v1/nodes/{name}/packet-capture?interface=eth0&duration=10s&snapLen=4096&promiscuous=false
//
// Each one checks, as the signed-in user, `download` on the matching
// talosclusters subresource; creates, as that user (so that the webhook checks
// the same permission and records them as the requester), a
// TalosCredentialRequest for a key pair made in memory, which the controller
// signs for the least Talos role and ten minutes; records a Warning Event
// naming the user on the TalosMachine; and only then calls the node with the
// certificate, which never leaves this process. The browser holds no Talos
// credential. A refusal answers before anything is created or recorded.
type Downloads struct {
	// Nodes resolves the machines and holds the user's clients.
	Nodes *Service
	// Backend acts as ichor-ui itself: it waits for and deletes the
	// credential requests and writes the Events.
	Backend client.Client
	// Timeout bounds the wait for the controller's signature; zero means 30 s.
	Timeout time.Duration
}

// downloadKind is what one route downloads.
type downloadKind struct {
	purpose     string
	contentType string
	extension   string
}

var downloadKinds = map[string]downloadKind{
	"support-bundle": {download.SupportBundle, "application/gzip", ".tar.gz"},
	"etcd-snapshot":  {download.EtcdSnapshot, "application/octet-stream", ".snapshot"},
	"packet-capture": {download.PacketCapture, "application/vnd.tcpdump.pcap", ".pcap"},
}

// ServeHTTP serves GET /api/v1/nodes/{name}/{kind} and TalosconfigPath. The request's context
// must carry the signed-in user (the server's authentication).
func (d *Downloads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, status.Error(codes.Unimplemented, "downloads are GET requests"))

		return
	}

	if r.URL.Path == TalosconfigPath {
		if err := d.serveTalosconfig(w, r); err != nil {
			writeError(w, err)
		}

		return
	}

	rest, _ := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
	name, route, ok := strings.Cut(rest, "/")

	kind, known := downloadKinds[route]
	if !ok || !known || name == "" {
		writeError(w, status.Errorf(codes.NotFound, "no download at %s: use /api/v1/nodes/NAME/support-bundle, etcd-snapshot or packet-capture", r.URL.Path))

		return
	}

	if err := d.serve(w, r, name, kind); err != nil {
		writeError(w, err)
	}
}

// serve runs one download; an error returned was met before any byte was sent.
func (d *Downloads) serve(w http.ResponseWriter, r *http.Request, name string, kind downloadKind) error {
	ctx := r.Context()

	id, ok := identity.From(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "sign in first: the request carries no signed-in user")
	}

	var (
		capture download.Capture
		detail  string
	)

	if kind.purpose == download.PacketCapture {
		var err error
		if capture, err = captureParams(r); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}

		detail = fmt.Sprintf("interface %s, %s, snap length %d", capture.Interface, capture.Duration, capture.SnapLen)
	}

	s := d.Nodes
	sub := guard.CredentialSubresource[kind.purpose]
	what := fmt.Sprintf("downloading the %s of node %s", sub, name)

	if err := s.Clients.AuthorizeSubresource(ctx, guard.VerbDownload, guard.ResourceTalosClusters, sub); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v (ichor-admin grants download on talosclusters/%s)", what, err, sub)
	}

	m, err := s.machine(ctx, name)
	if err != nil {
		return err
	}

	if kind.purpose == download.EtcdSnapshot && m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return status.Errorf(codes.FailedPrecondition,
			"machine %s is a %s: etcd runs on the control planes; download the snapshot from one of them", name, m.Spec.Role)
	}

	timeout := d.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}

	ictx, cancel := context.WithTimeout(ctx, timeout)
	cred, err := issue(ictx, issueRequest{
		create: s.Clients.User, read: d.Backend, namespace: s.Clients.Namespace, cluster: s.ClusterName,
		purpose: kind.purpose, generateName: "ichor-ui-" + kind.purpose + "-",
		what:            fmt.Sprintf("%s's %s", id.Username, kind.purpose),
		createForbidden: fmt.Sprintf("a download needs create on taloscredentialrequests and download on talosclusters/%s (ichor-admin)", sub),
	})

	cancel()

	if err != nil {
		return err
	}

	defer deleteRequest(context.WithoutCancel(ctx), d.Backend, s.Clients.Namespace, cred.Request)

	ev := download.Event(kind.purpose, id.Username, name, detail, "ichor-ui",
		download.Target{Kind: "TalosMachine", Namespace: m.Namespace, Name: m.Name, UID: string(m.UID)}, time.Now())
	if err := d.Backend.Create(ctx, ev); err != nil {
		return status.Errorf(codes.Unavailable,
			"%s: the download's Warning Event could not be recorded, so nothing was downloaded: %s (ichor-ui needs create on events in namespace %s)",
			what, apiMessage(err), s.Clients.Namespace)
	}

	c, err := talos.DialWithCertificate(ctx, m.Spec.Address, s.Port, cred.Cert, cred.Roots)
	if err != nil {
		return status.Errorf(codes.Unavailable, "node %s (%s): %v", name, m.Spec.Address, err)
	}

	defer c.Close() //nolint:errcheck

	file := fmt.Sprintf("%s-%s-%s%s", name, kind.purpose, time.Now().UTC().Format("20060102T150405Z"), kind.extension)
	out := &streamWriter{w: w, header: func(h http.Header) {
		h.Set("Content-Type", kind.contentType)
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", file))
		h.Set("Cache-Control", "no-store")
	}}

	switch kind.purpose {
	case download.SupportBundle:
		err = download.WriteSupportBundle(ctx, c, name, out)
	case download.EtcdSnapshot:
		_, err = download.WriteEtcdSnapshot(ctx, c, out)
	case download.PacketCapture:
		_, err = download.WritePacketCapture(ctx, c, capture, out)
	}

	if err != nil && !out.started {
		return status.Errorf(codes.Unavailable, "%s: %s", what, talos.Message(err))
	}

	// An error after the first byte can only end the answer short: the
	// client sees a truncated file (a gzip or a pcap that does not end).
	return nil
}

// machine resolves a running machine of the cluster with an address.
func (s *Service) machine(ctx context.Context, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, userError(ctx, err, "reading machine "+name)
	}

	if m.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}

	if m.Status.Stage != ichorv1alpha1.StageRunning {
		return nil, status.Errorf(codes.FailedPrecondition, "machine %s is not running (stage %q): its node can be downloaded from once it runs", name, m.Status.Stage)
	}

	if m.Spec.Address == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "machine %s has no spec.address to reach its node at", name)
	}

	return m, nil
}

// captureParams reads and checks a packet capture's parameters.
func captureParams(r *http.Request) (download.Capture, error) {
	q := r.URL.Query()
	c := download.Capture{Interface: q.Get("interface")}

	if v := q.Get("duration"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("duration %q is not a duration: give one like 10s or 1m", v)
		}

		c.Duration = d
	}

	if v := q.Get("snapLen"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return c, fmt.Errorf("snapLen %q is not a number of bytes", v)
		}

		c.SnapLen = uint32(n)
	}

	if v := q.Get("promiscuous"); v != "" {
		p, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("promiscuous %q is not true or false", v)
		}

		c.Promiscuous = p
	}

	return c.Normalize()
}

// streamWriter sends the headers and status 200 at the first byte and
// flushes each write, so that the file streams and an error met before the
// first byte can still answer with an error status.
type streamWriter struct {
	w       http.ResponseWriter
	header  func(http.Header)
	started bool
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if !s.started {
		s.started = true
		s.header(s.w.Header())
		s.w.WriteHeader(http.StatusOK)
	}

	n, err := s.w.Write(p)
	if err == nil {
		// Best effort: a writer that cannot flush still sends the bytes at its end.
		_ = http.NewResponseController(s.w).Flush()
	}

	return n, err
}

var _ io.Writer = (*streamWriter)(nil)

// apiError is the REST API's error shape.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers in the REST API's error shape (grpc-gateway's).
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	if err := json.NewEncoder(w).Encode(apiError{Code: int(st.Code()), Message: st.Message()}); err != nil {
		return // the client is gone; there is no one left to tell
	}
}
