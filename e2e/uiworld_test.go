package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The web console's part of the world: ichor-ui built from this tree and
// started as a subprocess against the emulated cluster, with Ichor's own users
// signed in by its OIDC issuer.

// uiServer is a running ichor-ui.
type uiServer struct {
	url string // https://127.0.0.1:PORT, also the issuer
	log string
}

var (
	uiOnce sync.Once
	theUI  *uiServer
	uiErr  error
)

// startedUI starts ichor-ui once for the package.
func startedUI(t *testing.T, w *world) *uiServer {
	t.Helper()

	uiOnce.Do(func() { theUI, uiErr = startUI(w) })

	if uiErr != nil {
		t.Fatal(uiErr)
	}

	return theUI
}

func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}

	defer func() { _ = ln.Close() }()

	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startUI(w *world) (*uiServer, error) {
	// sharedBin built it with the world's other binaries.
	bin := filepath.Join(w.bin, "ichor-ui")

	// Every listener on loopback: a compiled-in wildcard address (":8445")
	// would take the port from the in-cluster world's ichor-ui pod.
	var ports [3]int

	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}

		ports[i] = p
	}

	port := ports[0]

	s := &uiServer{url: fmt.Sprintf("https://127.0.0.1:%d", port), log: filepath.Join(w.dir, "ichor-ui.log")}

	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}

	c := exec.CommandContext(context.Background(), bin, "--cluster", cluster, "--namespace", "ichor-system", //nolint:gosec // our own binary
		"--ichor-users", "--issuer", s.url, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--issuer-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	c.Env, c.Stdout, c.Stderr = w.env, logf, logf

	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("starting ichor-ui: %w", err)
	}

	cleanups = append(cleanups, func() { stopProcess(c); _ = logf.Close() })

	deadline := time.Now().Add(time.Minute)

	for {
		code, _, err := s.get(context.Background(), "/readyz")
		if err == nil && code == http.StatusOK {
			return s, nil
		}

		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("/readyz answered %d", code)
			}

			return nil, fmt.Errorf("ichor-ui at %s is not ready after a minute (its log: %s): %w", s.url, s.log, err)
		}

		time.Sleep(500 * time.Millisecond)
	}
}

// client trusts ichor-ui's self-signed certificate: the test started it.
func (s *uiServer) client() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // the test's own self-signed ichor-ui on loopback
	}}
}

func (s *uiServer) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		return 0, nil, err
	}

	resp, err := s.client().Do(req)
	if err != nil {
		return 0, nil, err
	}

	defer func() { _ = resp.Body.Close() }()

	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)

	return resp.StatusCode, b.Bytes(), err
}

// uiUser is one of Ichor's own users, with the password `ichor user create` printed once.
type uiUser struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// createUser creates an IchorUser with one role through the CLI.
func (w *world) createUser(t *testing.T, ctx context.Context, name, role string) uiUser {
	t.Helper()

	out := w.mustIchor(t, ctx, "user", "create", name, "--role", role, "-o", "json")

	var u uiUser
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &u); err != nil || u.Password == "" {
		t.Fatalf("`ichor user create %s -o json` printed no name and password (%v):\n%s", name, err, out)
	}

	return u
}
