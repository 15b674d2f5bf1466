package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestEveryKindIsRegistered(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{
		"TalosCluster", "TalosMachine", "TalosConfigPatch", "TalosStorage", "TalosEtcdBackup", "TalosOperation",
		"IchorInstallation", "IchorUser", "MachineReclaim", "TalosCredentialRequest",
	} {
		for _, k := range []string{kind, kind + "List"} {
			obj, err := s.New(GroupVersion.WithKind(k))
			if err != nil {
				t.Errorf("%s is not registered: %v", k, err)
				continue
			}
			// DeepCopyObject is generated; a copy must be a distinct object.
			if cp := obj.DeepCopyObject(); cp == obj {
				t.Errorf("%s: DeepCopyObject returned the same pointer", k)
			}
		}
	}
}

// The JSON names are the API the architecture documents; a renamed tag is a breaking change.
func TestJSONFieldNames(t *testing.T) {
	yes := true
	c := TalosCluster{Spec: TalosClusterSpec{
		ControlPlane: ControlPlaneTopology{Count: 3, Schedulable: &yes},
		CNI:          CNISpec{Preset: CNIPresetCilium, Tunnel: "vxlan", KubeProxy: KubeProxyReplaced},
		Network:      ClusterNetwork{PodSubnets: []string{"10.244.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/12"}},
		Drift:        DriftSpec{Policy: DriftPolicyWarn},
		Security:     SecuritySpec{SecureBoot: "Required"},
	}}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"controlPlane":{"count":3,"schedulable":true}`,
		`"cni":{"preset":"cilium","tunnel":"vxlan","kubeProxy":"replaced"}`,
		`"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"]}`,
		`"drift":{"policy":"Warn"}`,
		`"secureBoot":"Required"`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("TalosCluster JSON lacks %s:\n%s", want, raw)
		}
	}
}
