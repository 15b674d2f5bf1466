package render_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// Rule (issue 24, the stages of a CA rotation): the CAs accepted beside the
// bundle's are rendered where Talos's own rotation puts them — the Talos API
// CA in machine.acceptedCAs on every machine, the Kubernetes CA in the
// KubeAPIServerCAConfig document (v1.14) or cluster.acceptedCAs (v1.12), the
// aggregator CA in a v1.14 control plane's KubeAggregatorCAConfig — after
// the bundle's own, which keeps issuing: a control plane's issuingCA and
// machine.ca are the bundle's, a worker's first accepted Kubernetes CA is
// the bundle's. No accepted CA renders the same bytes as before.
func TestAcceptedCAsRender(t *testing.T) {
	t.Parallel()

	other, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	acc := bundle.Accepted{
		Talos: []string{string(other.Certs.OS.Crt)}, Kubernetes: []string{string(other.Certs.K8s.Crt)}, Aggregator: []string{string(other.Certs.K8sAggregator.Crt)},
	}

	for _, tc := range []struct {
		contract, role string
	}{
		{"v1.14", ichorv1alpha1.RoleControlPlane},
		{"v1.14", ichorv1alpha1.RoleWorker},
		{"v1.12", ichorv1alpha1.RoleControlPlane},
		{"v1.12", ichorv1alpha1.RoleWorker},
	} {
		t.Run(tc.contract+"/"+tc.role, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Cluster.Spec.VersionContract = tc.contract
			in.Machine = machine("m-1", tc.role)
			in.Machine.Spec.Disks = nil
			plain := renderOK(t, in)

			in.Accepted = acc
			r := renderOK(t, in)

			if bytes.Equal(plain.Bytes, r.Bytes) {
				t.Fatal("the accepted CAs changed nothing in the render")
			}

			b := testBundle(t)
			sec := r.Config.Machine().Security()

			if !bytes.Equal(sec.IssuingCA().Crt, b.Certs.OS.Crt) {
				t.Error("machine.ca is not the bundle's Talos API CA")
			}

			if (len(sec.IssuingCA().Key) > 0) != (tc.role == ichorv1alpha1.RoleControlPlane) {
				t.Errorf("machine.ca carries a key: %t, on a %s", len(sec.IssuingCA().Key) > 0, tc.role)
			}

			if got := sec.AcceptedCAs(); len(got) != 1 || !bytes.Equal(got[0].Crt, other.Certs.OS.Crt) {
				t.Errorf("machine.acceptedCAs has %d certificates, want the other Talos API CA alone", len(got))
			}

			kca := r.Config.K8sAPIServerCAConfig()

			accepted := make([][]byte, 0, len(kca.AcceptedCAs()))
			for _, c := range kca.AcceptedCAs() {
				accepted = append(accepted, c.Crt)
			}

			want := [][]byte{b.Certs.K8s.Crt, other.Certs.K8s.Crt}
			if !slices.EqualFunc(accepted, want, bytes.Equal) {
				t.Errorf("the accepted Kubernetes CAs are %d certificates, want the bundle's then the other", len(accepted))
			}

			if tc.role == ichorv1alpha1.RoleControlPlane && (kca.IssuingCA() == nil || !bytes.Equal(kca.IssuingCA().Crt, b.Certs.K8s.Crt)) {
				t.Error("the issuing Kubernetes CA of a control plane is not the bundle's")
			}

			// The aggregator CA: a v1.14 control plane's KubeAggregatorCAConfig
			// accepts the other after the bundle's, which issues.
			if agg := r.Config.K8sAggregatorCAConfig(); tc.contract == "v1.14" && tc.role == ichorv1alpha1.RoleControlPlane {
				got := agg.AcceptedCAs()
				if len(got) != 2 || !bytes.Equal(got[0].Crt, b.Certs.K8sAggregator.Crt) || !bytes.Equal(got[1].Crt, other.Certs.K8sAggregator.Crt) ||
					!bytes.Equal(agg.IssuingCA().Crt, b.Certs.K8sAggregator.Crt) {
					t.Errorf("the accepted aggregator CAs are %d certificates, want the bundle's (issuing) then the other", len(got))
				}
			}

			if hasKind(values(t, r), "KubeAPIServerCAConfig") != (tc.contract == "v1.14") {
				t.Errorf("the %s render has a KubeAPIServerCAConfig document: %t", tc.contract, tc.contract != "v1.14")
			}
		})
	}
}
