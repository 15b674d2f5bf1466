package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestStartLoops: every loop of the table runs, one left out (nil) is
// skipped (calling it would panic), and a loop that fails is logged by name
// and stops ichor-ui.
func TestStartLoops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	stopped := make(chan struct{}, 3)
	ran := make(chan string, 3)
	startLoops(ctx, slog.New(slog.NewJSONHandler(logs, nil)), func() { stopped <- struct{}{} }, []loop{
		{name: "the quiet loop", run: func(context.Context) error { ran <- "quiet"; return nil }},
		{name: "the absent loop"},
		{name: "the failing loop", run: func(context.Context) error { ran <- "failing"; return errors.New("boom") }},
	})
	got := map[string]bool{}
	for range 2 {
		select {
		case name := <-ran:
			got[name] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("the loops did not all run: %v", got)
		}
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("a failing loop did not stop ichor-ui")
	}
	if out := logs.String(); !strings.Contains(out, "the failing loop stopped") || !strings.Contains(out, "boom") {
		t.Errorf("the log does not name the failing loop and its error:\n%s", out)
	}
}
