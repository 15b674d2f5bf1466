package main

import (
	"strings"
	"testing"
)

func TestErrorsSayWhatToDo(t *testing.T) {
	mustFail(t, ichorWith(t, invocation{env: []string{"KUBECONFIG=" + t.TempDir() + "/none"}}, "machine", "list"),
		"no kubeconfig", "--kubeconfig", "KUBECONFIG")
	mustFail(t, ichor(t, "machine", "list", "--context", "nope"), `context "nope" is not in the kubeconfig`, "contexts there:")
	mustFail(t, ichor(t, "machine", "frobnicate"), `unknown command "frobnicate"`, "ichor machine --help")
	mustFail(t, ichor(t, "machine", "get"), "takes one MACHINE")
	mustFail(t, ichor(t, "machine", "approve", "x", "--role", "worker", "--label", "bad key=v"), "not a valid label key")
	mustFail(t, ichor(t, "machine", "approve", "x", "--role", "worker", "--install-disk", "uuid=1"), `"uuid" is not a disk attribute`)
	mustFail(t, ichor(t, "secrets", "status", "--cluster", "../etc"), "not valid")
}

func TestCompletion(t *testing.T) {
	r := mustSucceed(t, ichor(t, "completion", "bash"))
	if !strings.Contains(r.stdout, "ichor") || !strings.Contains(r.stdout, "complete") {
		t.Fatalf("completion bash:\n%s", r.stdout)
	}
	help := mustSucceed(t, ichor(t, "--help"))
	if !strings.Contains(help.stdout, "completion") {
		t.Fatal("the completion command must be listed in the help")
	}
}
