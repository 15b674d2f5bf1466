package guard

import (
	"encoding/json"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The admission webhooks decode an object and hand it to these checks; the
// fuzz targets below feed them whatever JSON decodes into the type (seeded
// with ordinary objects): no object panics a check, and every refusal names
// a rule.

func fuzzSeeds(f *testing.F, objs ...any) {
	f.Helper()

	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			f.Fatal(err)
		}

		f.Add(b, b)
	}

	f.Add([]byte(`{}`), []byte(`{"spec":{}}`))
}

func checkRefusals(t *testing.T, what string, rf []Refusal) {
	t.Helper()

	for _, r := range rf {
		if r.Rule == "" {
			t.Fatalf("%s: a refusal without a rule: %+v", what, r)
		}
	}
}

func seedCluster() *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{}
	c.Name, c.Namespace = "prod", "ichor-system"
	c.Spec.TalosVersion, c.Spec.VersionContract, c.Spec.KubernetesVersion = "v1.14.1", "v1.14", "1.37.2"
	c.Spec.ControlPlane.Count = 3
	c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetCilium
	c.Spec.Network.PodSubnets, c.Spec.Network.ServiceSubnets = []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}
	c.Spec.Authentication.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"k"}}

	return c
}

func FuzzValidateCluster(f *testing.F) {
	fuzzSeeds(f, seedCluster())
	f.Fuzz(func(t *testing.T, oldJSON, newJSON []byte) {
		old, c := &ichorv1alpha1.TalosCluster{}, &ichorv1alpha1.TalosCluster{}
		if json.Unmarshal(oldJSON, old) != nil || json.Unmarshal(newJSON, c) != nil {
			return
		}

		facts := ClusterFacts{ApprovedControlPlanes: 1, ApprovedWorkers: 2, UIURL: "https://ichor.example.com"}
		checkRefusals(t, "ValidateCluster create", ValidateCluster(nil, c, facts))
		checkRefusals(t, "ValidateCluster update", ValidateCluster(old, c, facts))
		checkRefusals(t, "ValidateClusterDelete", ValidateClusterDelete(c))
		_ = ClusterRequirements(old, c)
		_ = CheckAuthentication(c)
	})
}

func FuzzValidateMachine(f *testing.F) {
	m := &ichorv1alpha1.TalosMachine{}
	m.Name, m.Namespace = "cp-1", "ichor-system"
	m.Spec.ClusterName, m.Spec.Address, m.Spec.Role = "prod", "10.0.0.2", ichorv1alpha1.RoleControlPlane
	m.Spec.Approval.State = ichorv1alpha1.ApprovalApproved
	fuzzSeeds(f, m)
	f.Fuzz(func(t *testing.T, oldJSON, newJSON []byte) {
		old, m := &ichorv1alpha1.TalosMachine{}, &ichorv1alpha1.TalosMachine{}
		if json.Unmarshal(oldJSON, old) != nil || json.Unmarshal(newJSON, m) != nil {
			return
		}

		facts := MachineFacts{Cluster: seedCluster(), OtherApprovedControlPlanes: 2, OtherApprovedWorkers: 1}
		checkRefusals(t, "ValidateMachine create", ValidateMachine(nil, m, facts))
		checkRefusals(t, "ValidateMachine update", ValidateMachine(old, m, facts))
		checkRefusals(t, "ValidateMachineDelete", ValidateMachineDelete(m, facts))
		_ = MachineRequirements(old, m)
		_ = MachineWarnings(old, m)
	})
}

func FuzzValidateOperation(f *testing.F) {
	op := &ichorv1alpha1.TalosOperation{}
	op.Name, op.Namespace = "up-1", "ichor-system"
	op.Spec.ClusterName, op.Spec.Type = "prod", ichorv1alpha1.OperationConfig
	fuzzSeeds(f, op)
	f.Fuzz(func(t *testing.T, _, opJSON []byte) {
		op := &ichorv1alpha1.TalosOperation{}
		if json.Unmarshal(opJSON, op) != nil {
			return
		}

		checkRefusals(t, "ValidateOperation", ValidateOperation(op, OperationFacts{Cluster: seedCluster()}))
	})
}
