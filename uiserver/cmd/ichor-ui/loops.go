package main

import (
	"context"
	"log/slog"
)

// loop is one of ichor-ui's background loops: it runs until ctx ends.
// main's tables (run) list every loop in one place.
type loop struct {
	// name says what stopped in the log ("<name> stopped").
	name string
	// run is the loop; nil leaves it out (a part this configuration does
	// not have). An error stops ichor-ui.
	run func(ctx context.Context) error
}

// startLoops starts each loop of the table in its own goroutine, in order.
// A loop that returns an error is logged and stops ichor-ui (stop).
func startLoops(ctx context.Context, log *slog.Logger, stop func(), loops []loop) {
	for _, l := range loops {
		if l.run == nil {
			continue
		}
		go func() {
			if err := l.run(ctx); err != nil {
				log.Error(l.name+" stopped", "error", err.Error())
				stop()
			}
		}()
	}
}

// forever adapts a loop that reports nothing.
func forever(f func(ctx context.Context)) func(ctx context.Context) error {
	return func(ctx context.Context) error { f(ctx); return nil }
}
