package release

import (
	"strings"
	"testing"
)

func TestDefaultsAreCompatible(t *testing.T) {
	if err := CheckKubernetesSupported(DefaultTalosVersion, DefaultKubernetesVersion); err != nil {
		t.Fatalf("the pinned defaults must be a supported pair: %v", err)
	}
}

func TestCheckKubernetesSupported(t *testing.T) {
	tests := []struct {
		name      string
		talos     string
		kube      string
		wantError string
	}{
		{name: "oldest supported on 1.14", talos: "v1.14.1", kube: "1.32.0"},
		{name: "newest supported on 1.14", talos: "v1.14.1", kube: "1.37.9"},
		{name: "too old for 1.14", talos: "v1.14.1", kube: "1.31.4", wantError: "cannot run on talos v1.14.1"},
		{name: "too new for 1.14", talos: "v1.14.1", kube: "1.38.0", wantError: "cannot run on talos v1.14.1"},
		{name: "bad talos version", talos: "fourteen", kube: "1.37.2", wantError: `talos version "fourteen" is not a valid version`},
		{name: "bad kubernetes version", talos: "v1.14.1", kube: "latest", wantError: `kubernetes version "latest" is not a valid version`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKubernetesSupported(tt.talos, tt.kube)
			switch {
			case tt.wantError == "" && err != nil:
				t.Fatalf("want supported, got %v", err)
			case tt.wantError != "" && err == nil:
				t.Fatalf("want an error containing %q, got none", tt.wantError)
			case tt.wantError != "" && !strings.Contains(err.Error(), tt.wantError):
				t.Fatalf("want an error containing %q, got %q", tt.wantError, err)
			}
		})
	}
}

func TestPinnedSetIsCompatible(t *testing.T) {
	if err := CheckPair(Pinned.Talos, Pinned.Kubernetes); err != nil {
		t.Fatalf("the pinned Talos and Kubernetes must be a supported pair: %v", err)
	}
	if err := CheckContract(Pinned.VersionContract, Pinned.Talos); err != nil {
		t.Fatalf("the pinned contract must render for the pinned Talos: %v", err)
	}
	if _, err := CheckCiliumPair(Pinned.Cilium, Pinned.Kubernetes); err != nil {
		t.Fatalf("the pinned Cilium must run on the pinned Kubernetes: %v", err)
	}
}
