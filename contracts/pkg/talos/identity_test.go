package talos

import (
	"errors"
	"strings"
	"testing"
)

func TestCompareIdentity(t *testing.T) {
	const a, b = "4c4c4544-0031-4810-8036-b7c04f4d3132", "4c4c4544-0031-4810-8036-b7c04f4d3133"

	for _, tc := range []struct {
		name      string
		want, got Identity
		fields    string // "" means a match
		mismatch  bool
	}{
		{name: "same machine", want: Identity{UUID: a, Hostname: "w-1", NodeName: "w-1"}, got: Identity{UUID: strings.ToUpper(a), Hostname: "w-1", NodeName: "w-1"}},
		{name: "another UUID", want: Identity{UUID: a, Hostname: "w-1"}, got: Identity{UUID: b, Hostname: "w-1"}, fields: "SMBIOS UUID", mismatch: true},
		{name: "no UUID reported", want: Identity{UUID: a}, got: Identity{Hostname: "w-1"}, fields: "SMBIOS UUID", mismatch: true},
		{name: "another Node", want: Identity{UUID: a, NodeName: "w-1"}, got: Identity{UUID: a, NodeName: "cp-1"}, fields: "Node name", mismatch: true},
		{name: "hostname with a domain", want: Identity{Hostname: "w-1.lab.example"}, got: Identity{Hostname: "w-1"}},
		{name: "another hostname", want: Identity{Hostname: "w-1"}, got: Identity{Hostname: "cp-1", UUID: b}, fields: "hostname", mismatch: true},
		{name: "a field the node lacks is not compared", want: Identity{UUID: a, NodeName: "w-1"}, got: Identity{UUID: a}},
		{name: "nothing recorded", want: Identity{}, got: Identity{UUID: b}, mismatch: true},
		{name: "nothing comparable", want: Identity{NodeName: "w-1"}, got: Identity{UUID: b}, mismatch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Compare("192.0.2.10", tc.want, tc.got)

			mm := AsIdentityMismatch(err)
			if (mm != nil) != tc.mismatch || (err != nil) != tc.mismatch {
				t.Fatalf("Compare: %v, want mismatch %t", err, tc.mismatch)
			}

			if mm == nil {
				return
			}

			if got := strings.Join(mm.Fields, ", "); got != tc.fields {
				t.Errorf("fields %q, want %q", got, tc.fields)
			}

			msg := err.Error()
			if !strings.Contains(msg, "192.0.2.10") || !strings.Contains(msg, "nothing was sent") {
				t.Errorf("the error does not say where and that nothing was sent: %s", msg)
			}

			for _, id := range []string{tc.want.UUID, tc.got.UUID} {
				if id != "" && !strings.Contains(msg, id) {
					t.Errorf("the error does not name %s: %s", id, msg)
				}
			}
		})
	}
}

func TestCompareMember(t *testing.T) {
	m := EtcdMember{ID: 0x8e9e05c52164694d, Hostname: "cp-2"}

	if err := CompareMember(m, Identity{Hostname: "cp-2"}); err != nil {
		t.Errorf("its own member: %v", err)
	}

	if err := CompareMember(m, Identity{NodeName: "cp-2"}); err != nil {
		t.Errorf("its own member by Node name: %v", err)
	}

	err := CompareMember(m, Identity{Hostname: "cp-3", NodeName: "cp-3"})

	var mm *IdentityMismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "cp-2") || !strings.Contains(err.Error(), "cp-3") {
		t.Errorf("another machine's member: %v", err)
	}

	if err := CompareMember(m, Identity{UUID: "x"}); AsIdentityMismatch(err) == nil {
		t.Errorf("a machine without a hostname or Node name: %v", err)
	}
}
