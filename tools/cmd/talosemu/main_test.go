package main

import (
	"strings"
	"testing"
)

func TestRunRejectsBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "give --machines N or --spec FILE"},
		{[]string{"--machines", "2", "--subnet", "10.0.0.0/24"}, "must be an IPv4 range inside 127.0.0.0/8"},
		{[]string{"--machines", "2", "--controlplanes", "3"}, "--controlplanes must be between 0 and 2"},
		{[]string{"--spec", "/nonexistent/spec.yaml"}, "reading spec"},
		{[]string{"--machines", "1", "--subnet", "127.77.252.0/24", "--state-dir", t.TempDir(), "--control", "0.0.0.0:0"}, "must be on loopback"},
		{[]string{"--machines", "1", "--subnet", "127.77.252.0/24", "--state-dir", ""}, "a state directory is required"},
		{[]string{"--machines", "1", "--subnet", "127.77.252.0/24", "--state-dir", t.TempDir(), "--kubernetes", "--kube-assets", t.TempDir()}, "run `go tool task assets`"},
	}

	for _, c := range cases {
		err := run(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q): want error containing %q, got %v", c.args, c.want, err)
		}
	}
}
