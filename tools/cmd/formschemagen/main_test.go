package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
)

const (
	crdFile    = "../../../kustomize/base/crd/ichor.maesh.dev_talosconfigpatches.yaml"
	schemaFile = "../../../webapp/src/api/configschema.json"
)

// TestSchema: the console's form schema holds exactly the allow-list's
// kinds, no secret field, machinery's valid values and the privileged and
// apply-mode marks; and the committed file is what the generator writes.
func TestSchema(t *testing.T) {
	b, err := generate(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, committed) {
		t.Errorf("%s is stale: run `go tool task generate:webapp`", schemaFile)
	}
	var s Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, 0, len(s.Kinds))
	by := map[string]*Node{}
	for _, k := range s.Kinds {
		kinds = append(kinds, k.Kind)
		by[k.Kind] = k.Schema
	}
	allowed := slices.Sorted(slices.Values(configpatch.Allowed))
	if !slices.Equal(kinds, allowed) {
		t.Fatalf("kinds %v, want the allow-list %v", kinds, allowed)
	}
	if got := by["VLANConfig"].Props["vlanMode"].Enum; !slices.Contains(got, "802.1ad") {
		t.Errorf("VLANConfig:vlanMode has machinery's values: %v", got)
	}
	if by["TrustedRootsConfig"].Privileged == "" || by["KubeletConfig"].Props["image"].Privileged == "" || by["KubeletConfig"].Privileged != "" {
		t.Error("the privileged marks must follow contracts/pkg/privileged: TrustedRootsConfig and KubeletConfig:image, not KubeletConfig")
	}
	if by["KubeAPIServerConfig"].Class != "APIServerRestart" || by["SysctlConfig"].Class != "NoReboot" {
		t.Error("each kind carries its apply class")
	}
	if _, ok := by["RegistryTLSConfig"].Props["clientIdentity"].Props["key"]; ok {
		t.Error("the secret field RegistryTLSConfig:clientIdentity.key is in the form schema")
	}
}
