package version

import (
	"errors"
	"strings"
	"testing"
)

func TestSkew(t *testing.T) {
	for _, tc := range []struct {
		client, server string
		refused        bool
	}{
		{"v0.4.0", "v0.4.7", false},
		{"v0.4.0", "v0.5.1", false}, // one minor older CLI
		{"v0.5.0", "v0.4.0", false}, // one minor newer CLI
		{"v0.4.0", "v0.6.0", true},  // two minors older
		{"v0.6.2", "v0.4.9", true},  // two minors newer
		{"v1.4.0", "v0.4.0", true},  // another major, same minor
		{"v1.0.0", "v0.9.0", true},  // adjacent across a major
		{"v1.4.0-rc.1", "v1.5.0", false},
		{"v1.4.0", "v1.6.0+build.7", true},
		{"v0.4.0", "", false},                   // no installation recorded
		{"v0.0.0-dev", "v0.9.0", false},         // a development CLI
		{"v0.0.0-dev+abc1234", "v0.9.0", false}, // as `task build` links it
		{"v0.9.0", "v0.0.0-dev+abc1234", false}, // a development server
		{"(devel)", "v0.9.0", false},            // a hand-made CLI build
	} {
		err := Skew(tc.client, tc.server)
		if (err != nil) != tc.refused {
			t.Errorf("Skew(%s, %s) = %v, want refused=%v", tc.client, tc.server, err, tc.refused)
			continue
		}
		if err == nil {
			continue
		}
		var skew *SkewError
		if !errors.As(err, &skew) {
			t.Errorf("Skew(%s, %s): %T, want a *SkewError", tc.client, tc.server, err)
		}
		for _, want := range []string{tc.client, tc.server, "install ichor", "ichor version"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Skew(%s, %s) = %q: does not say %q", tc.client, tc.server, err, want)
			}
		}
	}
	if err := Skew("v0.4.0", "v0.6.0"); !strings.Contains(err.Error(), "install ichor v0.6.x") {
		t.Errorf("the refusal must name the CLI to install: %v", err)
	}
	err := Skew("v0.4.0", "latest")
	var skew *SkewError
	if err == nil || errors.As(err, &skew) || !strings.Contains(err.Error(), `"latest"`) {
		t.Errorf("a server version that is not a release must be an error that quotes it, got %v", err)
	}
}
