package commands

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestUnreachable: following an operation waits through an API server that
// does not answer (refused or reset connections, a dial that times out, 503,
// 429, timeouts: the operation may restart it) and stops at once on an
// answer that refuses (forbidden, not found, invalid).
func TestUnreachable(t *testing.T) {
	gr := schema.GroupResource{Group: "ichor.maesh.dev", Resource: "talosoperations"}

	// A real refused connection: nothing listens on the port.
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := lis.Addr().String()
	_ = lis.Close()

	_, refused := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if refused == nil {
		t.Fatal("a closed port accepted a connection")
	}

	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"connection refused":  {fmt.Errorf("get: %w", refused), true},
		"service unavailable": {apierrors.NewServiceUnavailable("restarting"), true},
		"too many requests":   {apierrors.NewTooManyRequests("busy", 1), true},
		"server timeout":      {apierrors.NewServerTimeout(gr, "get", 1), true},
		"forbidden":           {apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		"not found":           {apierrors.NewNotFound(gr, "x"), false},
		"other":               {errors.New("the request is invalid"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s (%v): unreachable %v, want %v", name, tc.err, got, tc.want)
		}
	}
}
