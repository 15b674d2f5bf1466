package v1alpha1

import (
	"strings"
	"testing"
)

// TestMachineName: one identity, spelled differently (MAC case and order,
// duplicates, UUID case), gets one name; another identity another; a long
// cluster name is cut so the name stays a valid object name.
func TestMachineName(t *testing.T) {
	a := MachineIdentity{UUID: "ABC", Serial: "S1", MACAddresses: []string{"AA:BB", "cc:dd", "aa:bb"}}
	b := MachineIdentity{UUID: "abc", Serial: "S1", MACAddresses: []string{"CC:DD", "aa:bb"}}

	if MachineName("prod", a) != MachineName("prod", b) {
		t.Errorf("one identity, two names: %s %s", MachineName("prod", a), MachineName("prod", b))
	}

	if c := (MachineIdentity{UUID: "abc", Serial: "S2"}); MachineName("prod", c) == MachineName("prod", a) {
		t.Error("two identities, one name")
	}

	long := MachineName(strings.Repeat("x", 300), a)
	if len(long) > 253 || !strings.HasPrefix(long, "xxx") {
		t.Errorf("name of %d characters: %q", len(long), long)
	}

	if n := MachineName("prod-.", a); !strings.HasPrefix(n, "prod-") || strings.HasPrefix(n, "prod-.-") {
		t.Errorf("trailing separators kept: %s", n)
	}
}
