package identity

import (
	"errors"
	"testing"
)

func TestPolicy(t *testing.T) {
	p := Policy{ExtraGroups: []string{"team-a"}}
	for _, c := range []struct {
		id Identity
		ok bool
	}{
		{Identity{Username: "ichor:ada", Groups: []string{"ichor:admin"}}, true},
		{Identity{Username: "oidc:bob", Groups: []string{"team-a"}}, true},
		{Identity{Username: "ichor:ada", Groups: []string{"system:masters"}}, false},
		{Identity{Username: "system:admin"}, false},
		{Identity{Username: "admin"}, false},
		{Identity{Username: "ichor:"}, false},
		{Identity{Username: "ichor:x", Groups: []string{"team-b"}}, false},
	} {
		err := p.Check(c.id)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrNotAllowed)) {
			t.Errorf("Check(%+v) = %v, want ok=%v", c.id, err, c.ok)
		}
	}
	if got := p.Allowed([]string{"system:masters", "ichor:viewer", "team-a", "other"}); len(got) != 2 || got[0] != "ichor:viewer" || got[1] != "team-a" {
		t.Errorf("Allowed = %v", got)
	}
}
