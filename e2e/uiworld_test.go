package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The web console's part of the world: the in-cluster ichor-ui, the issuer
// of Ichor's own users at the loopback address `ichor init --ui-url`
// recorded, reached through `ichor ui`, which port-forwards that address to
// the ichor-ui pod (and to its successor when the pod goes away).

// uiServer is a reachable ichor-ui.
type uiServer struct {
	url string // https://127.0.0.1:PORT, also the issuer
	// forward is the `ichor ui` that forwards url to the pod.
	forward *uiForward
}

var (
	uiOnce sync.Once
	theUI  *uiServer
	uiErr  error
)

// startedUI starts `ichor ui` once for the package and waits until the
// console answers through it.
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
	if w.uiURL == "" {
		return nil, errors.New("this world recorded no ichor-ui address: Ichor does not run in it")
	}

	f, err := w.startUIForward(context.Background())
	if err != nil {
		return nil, err
	}

	if f.url != w.uiURL {
		return nil, fmt.Errorf("`ichor ui` forwards %s, not the address init recorded (%s)", f.url, w.uiURL)
	}

	s := &uiServer{url: f.url, forward: f}
	deadline := time.Now().Add(2 * time.Minute)

	for {
		code, _, err := s.get(context.Background(), "/readyz")
		if err == nil && code == http.StatusOK {
			return s, nil
		}

		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("/readyz answered %d", code)
			}

			return nil, fmt.Errorf("ichor-ui through `ichor ui` at %s is not ready after 2 minutes (its errors: %s): %w", s.url, f.stderr.String(), err)
		}

		time.Sleep(time.Second)
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
