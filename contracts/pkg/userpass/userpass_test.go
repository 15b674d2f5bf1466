package userpass

import (
	"strings"
	"testing"
)

func TestCheckRoles(t *testing.T) {
	if err := CheckRoles([]string{"viewer", "admin"}); err != nil {
		t.Fatal(err)
	}

	for roles, want := range map[string]string{"": "one or more roles", "root": `role "root" is not a role: use viewer, operator, admin`} {
		var rs []string
		if roles != "" {
			rs = []string{roles}
		}

		if err := CheckRoles(rs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want %q", rs, err, want)
		}
	}
}
