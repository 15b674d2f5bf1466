package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	info := Get()
	if info.Version == "" || !strings.HasPrefix(info.Version, "v") {
		t.Fatalf("version must be a semantic version with a leading v, got %q", info.Version)
	}
	if info.GoVersion != runtime.Version() {
		t.Fatalf("go version: got %q, want %q", info.GoVersion, runtime.Version())
	}
	if !strings.Contains(info.String(), info.Version) {
		t.Fatalf("String() %q does not name the version", info.String())
	}
}
