package main

import (
	"go/ast"
	"testing"
)

func TestJSONKindName(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"KubeletConfig":       "kubeletConfig",
		"HTTPProbeConfig":     "httpProbeConfig",
		"DHCPv4Config":        "dhcpv4Config",
		"KubeAPIServerConfig": "kubeAPIServerConfig",
		"OOMConfig":           "oomConfig",
		"Layer2VIPConfig":     "layer2VIPConfig",
		"v1alpha1":            "v1alpha1",
	} {
		if got := jsonKindName(in); got != want {
			t.Errorf("jsonKindName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGoName(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"maxPoolPercent": "MaxPoolPercent",
		"rx-jumbo":       "RxJumbo",
		"ca":             "Ca",
	} {
		if got := goName(in); got != want {
			t.Errorf("goName(%q) = %q, want %q", in, got, want)
		}
	}
}

func comments(lines ...string) *ast.CommentGroup {
	cg := &ast.CommentGroup{}
	for _, l := range lines {
		cg.List = append(cg.List, &ast.Comment{Text: "//" + l})
	}

	return cg
}

func TestDescription(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		in   *ast.CommentGroup
		want string
	}{
		{"nil", nil, ""},
		{
			"block",
			comments("   description: |", "     The MTU of the link.", "", "     Zero keeps the default.", "   examples:", "     - value: 1500"),
			"The MTU of the link.\n\nZero keeps the default.",
		},
		{"inline", comments("   description: Bring the link up."), "Bring the link up."},
		{"plain", comments(" Size is a byte size.", "", " docgen:nodoc"), "Size is a byte size."},
	} {
		if got := description(tc.in); got != tc.want {
			t.Errorf("%s: description = %q, want %q", tc.name, got, tc.want)
		}
	}
}
