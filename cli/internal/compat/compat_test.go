package compat

import (
	"strings"
	"testing"
)

func TestCheckWrite(t *testing.T) {
	for _, tc := range []struct {
		client, server string
		ok             bool
	}{
		{"v0.4.0", "v0.4.7", true},
		{"v0.4.0", "v0.5.1", true},
		{"v0.5.0", "v0.4.0", true},
		{"v0.4.0", "v0.6.0", false},
		{"v0.6.2", "v0.4.9", false},
		{"v1.4.0", "v0.4.0", false},
		{"v1.4.0-rc.1", "v1.5.0", true},
		{"v0.4.0", "", true},
		{"v0.0.0-dev", "v0.9.0", true},
	} {
		err := CheckWrite(tc.client, tc.server)
		if (err == nil) != tc.ok {
			t.Errorf("CheckWrite(%s, %s) = %v, want ok=%v", tc.client, tc.server, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "install ichor") {
			t.Errorf("the refusal must say what to install: %v", err)
		}
	}
	if err := CheckWrite("v0.4.0", "latest"); err == nil {
		t.Error("a server version that does not parse must be an error")
	}
}
