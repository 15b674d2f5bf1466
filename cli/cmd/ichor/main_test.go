package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	if err := app.Run(context.Background(), []string{"ichor", "version", "--client"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), version.Get().Version) {
		t.Fatalf("version output %q does not name %s", out.String(), version.Get().Version)
	}
}

func TestUnknownCommandFails(t *testing.T) {
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	if err := app.Run(context.Background(), []string{"ichor", "frobnicate"}); err == nil {
		t.Fatalf("an unknown command must fail; output %q", out.String())
	} else if !strings.Contains(err.Error(), `unknown command "frobnicate"`) || !strings.Contains(err.Error(), "ichor --help") {
		t.Fatalf("the error must name the command and the way out, got %q", err)
	}
}
