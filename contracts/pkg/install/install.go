// Package install holds Ichor's install manifest, built from kustomize/base by
// the chart generator (`go tool task generate`) and embedded in the CLI and
// the installer, so `ichor init` and the installer Job install Ichor with no
// network access to a registry of manifests; and what the installer and the
// controller decide alike about it (the steps, one replica or two).
package install

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed install.yaml
var manifest []byte

// Namespace is the namespace Ichor runs in.
const Namespace = "ichor-system"

// Manifest returns the install manifest, multi-document YAML.
func Manifest() []byte { return bytes.Clone(manifest) }

// Objects parses the install manifest, in its order (the Namespace and the
// CRDs first, as kustomize orders them).
func Objects() ([]*unstructured.Unstructured, error) {
	return Parse(manifest)
}

// ParseIn parses manifest data (Manifest(), or another release's) with
// Ichor's namespace renamed to namespace: the Namespace object, the
// namespaced objects, the ServiceAccount subjects of the bindings, the webhook
// Service references and the ServiceAccount user names in admission
// expressions (as the chart generator does for a release's namespace).
func ParseIn(data []byte, namespace string) ([]*unstructured.Unstructured, error) {
	if namespace != "" && namespace != Namespace {
		data = bytes.ReplaceAll(data, []byte("namespace: "+Namespace+"\n"), []byte("namespace: "+namespace+"\n"))
		data = bytes.ReplaceAll(data, []byte("system:serviceaccount:"+Namespace+":"), []byte("system:serviceaccount:"+namespace+":"))
	}

	objs, err := Parse(data)
	if err != nil {
		return nil, err
	}

	for _, o := range objs {
		if o.GetKind() == kindNamespace && namespace != "" {
			o.SetName(namespace)
		}
	}

	return objs, nil
}

// UserRoles are the built-in ClusterRoles of Ichor's users and the bindings
// to the ichor: groups (kustomize/base/rbac/user-roles.yaml).
var UserRoles = []string{"ichor-viewer", "ichor-operator", "ichor-admin", "ichor-machine-reclaimer", "ichor-ca-rotation-credentials"}

// CRDs returns the Namespace, the CustomResourceDefinitions and the users'
// roles and bindings of the manifest: what `ichor init --install=none`
// applies, because init writes the custom resources itself and the users of
// a controller running elsewhere still need their roles.
func CRDs() ([]*unstructured.Unstructured, error) {
	all, err := Objects()
	if err != nil {
		return nil, err
	}

	var out []*unstructured.Unstructured

	for _, o := range all {
		switch o.GetKind() {
		case kindCRD, kindNamespace:
			out = append(out, o)
		case "ClusterRole", "ClusterRoleBinding":
			if slices.Contains(UserRoles, o.GetName()) {
				out = append(out, o)
			}
		}
	}

	return out, nil
}

// Parse reads multi-document YAML into objects; empty documents are skipped.
func Parse(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)

	var out []*unstructured.Unstructured

	for i := 0; ; i++ {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}

			return nil, fmt.Errorf("document %d of the manifest: %w", i+1, err)
		}

		if len(obj) == 0 {
			continue
		}

		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d of the manifest has no kind or apiVersion", i+1)
		}

		out = append(out, u)
	}
}
