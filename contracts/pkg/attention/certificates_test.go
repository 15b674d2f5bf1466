package attention

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

const day = 24 * time.Hour

func in(d time.Duration) *metav1.Time { return &metav1.Time{Time: testNow.Add(d)} }

// A CA within 30 days of its expiry is a warning, an expired one an error;
// one further away, or without a date, is not listed. The CAs that
// `ichor cluster rotate-ca` replaces carry that command (the aggregator CA
// with --aggregator-only); the etcd CA says that this release cannot rotate it. The CertificatesExpiring condition the
// controller sets from the same rule adds no second entry.
func TestExpiringCertificates(t *testing.T) {
	c := cluster()
	c.Status.Certificates = ichorv1alpha1.CertificatesStatus{
		TalosCAExpiry:      in(10 * day),
		KubernetesCAExpiry: in(-time.Hour),
		EtcdCAExpiry:       in(31 * day),
		AggregatorCAExpiry: in(20 * day),
	}
	c.Status.Conditions = append(c.Status.Conditions, CertificatesCondition(c.Name, c.Status.Certificates, testNow))
	if !ichorv1alpha1.ConditionAbnormal(c.Status.Conditions[len(c.Status.Conditions)-1]) {
		t.Fatalf("the condition the controller would set is not abnormal: %+v", c.Status.Conditions)
	}

	got := Items(c, nil, nil, nil, testNow)
	if len(got) != 3 {
		t.Fatalf("want the Kubernetes CA (expired), the Talos API CA (10 days) and the aggregator CA (20 days), once each, got %+v", got)
	}
	rotate := "ichor cluster rotate-ca prod"
	if got[0].Severity != Error || got[0].Key != "TalosCluster/prod/Certificate/kubernetes" || !strings.Contains(got[0].Summary, "Kubernetes CA of cluster prod has expired") ||
		got[0].Command != rotate || !got[0].Since.Equal(testNow.Add(-time.Hour)) {
		t.Errorf("the expired CA first, as an error: %+v", got[0])
	}
	byKey := map[string]Item{}
	for _, it := range got[1:] {
		byKey[it.Key] = it
	}
	if it := byKey["TalosCluster/prod/Certificate/talos"]; it.Severity != Warning || !strings.Contains(it.Summary, "expires in 10 days; rotate it before then") ||
		it.Command != rotate || !strings.Contains(it.Detail, "Talos API CA not after "+testNow.Add(10*day).Format(time.RFC3339)) {
		t.Errorf("the Talos API CA in 10 days, a warning with the rotate-ca command: %+v", it)
	}
	if it := byKey["TalosCluster/prod/Certificate/aggregator"]; it.Severity != Warning || it.Command != rotate+" --aggregator-only" ||
		!strings.Contains(it.Summary, "Kubernetes aggregator CA of cluster prod expires in 20 days; rotate it before then") {
		t.Errorf("the aggregator CA in 20 days, with the rotate-ca command for it alone: %+v", it)
	}
	for _, it := range got {
		if strings.HasSuffix(it.Key, "/"+ichorv1alpha1.CertificatesExpiringCondition) {
			t.Errorf("the condition is told beside the CAs: %+v", it)
		}
	}

	// A day later nothing changed but the count.
	c.Status.Certificates.KubernetesCAExpiry = nil
	c.Status.Certificates.AggregatorCAExpiry = nil
	if got := Items(c, nil, nil, nil, testNow.Add(day)); len(got) != 1 || !strings.Contains(got[0].Summary, "expires in 9 days") {
		t.Errorf("a day later: %+v", got)
	}

	// An expired etcd CA says there is no command for it.
	c.Status.Certificates = ichorv1alpha1.CertificatesStatus{EtcdCAExpiry: in(-day)}
	if got := Items(c, nil, nil, nil, testNow); len(got) != 1 || got[0].Severity != Error || got[0].Command != "" ||
		!strings.Contains(got[0].Summary, "etcd CA of cluster prod has expired; this release of Ichor cannot rotate it") {
		t.Errorf("an expired etcd CA: %+v", got)
	}
}

// The condition is True while a recorded CA expires within 30 days, naming
// each such CA, its not-after and the way out, CertificatesExpired once one
// has expired; False otherwise.
func TestCertificatesCondition(t *testing.T) {
	date := func(d time.Duration) string { return testNow.Add(d).UTC().Format(time.RFC3339) }
	rotate := ": rotate it with `ichor cluster rotate-ca prod`"

	for _, tc := range []struct {
		name     string
		certs    ichorv1alpha1.CertificatesStatus
		status   metav1.ConditionStatus
		reason   string
		contains []string
		lacks    []string
	}{
		{"nothing recorded", ichorv1alpha1.CertificatesStatus{}, metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason,
			[]string{"valid for more than 30 days"}, nil},
		{"all far away", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(3650 * day), KubernetesCAExpiry: in(3650 * day), EtcdCAExpiry: in(3650 * day), AggregatorCAExpiry: in(3650 * day)},
			metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason, nil, []string{"rotate"}},
		{"exactly 30 days is not yet", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(30 * day)},
			metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason, nil, nil},
		{"a second inside the window", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(30*day - time.Second), EtcdCAExpiry: in(3650 * day)},
			metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason,
			[]string{"the Talos API CA expires at " + date(30*day-time.Second) + rotate}, []string{"etcd"}},
		{"the Talos API and Kubernetes CAs", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(10 * day), KubernetesCAExpiry: in(12 * day), EtcdCAExpiry: in(40 * day)},
			metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason,
			[]string{"the Talos API CA expires at " + date(10*day) + rotate + "; the Kubernetes CA expires at " + date(12*day) + rotate},
			[]string{"etcd"}},
		{"the etcd CA cannot be rotated", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(400 * day), EtcdCAExpiry: in(5 * day)},
			metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason,
			[]string{"the etcd CA expires at " + date(5*day) + ": this release of Ichor cannot rotate the etcd CA"}, []string{"rotate-ca", "Talos API CA"}},
		{"the aggregator CA rotates on request", ichorv1alpha1.CertificatesStatus{AggregatorCAExpiry: in(29 * day)},
			metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason,
			[]string{"the Kubernetes aggregator CA expires at " + date(29*day) + ": rotate it with `ichor cluster rotate-ca prod --aggregator-only`"}, []string{"cannot"}},
		{"one expired", ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(10 * day), KubernetesCAExpiry: in(-time.Hour)},
			metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiredReason,
			[]string{"the Talos API CA expires at " + date(10*day), "the Kubernetes CA expired at " + date(-time.Hour) + rotate}, nil},
		{"the client certificate is not a CA", ichorv1alpha1.CertificatesStatus{ClientCertificateExpiry: in(time.Minute)},
			metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CertificatesCondition("prod", tc.certs, testNow)
			if c.Type != ichorv1alpha1.CertificatesExpiringCondition || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("condition %+v, want %s %s", c, tc.status, tc.reason)
			}
			for _, want := range tc.contains {
				if !strings.Contains(c.Message, want) {
					t.Errorf("message %q lacks %q", c.Message, want)
				}
			}
			for _, not := range tc.lacks {
				if strings.Contains(c.Message, not) {
					t.Errorf("message %q holds %q", c.Message, not)
				}
			}
			// The items name exactly the CAs the condition names.
			cl := cluster()
			cl.Status.Certificates = tc.certs
			items := certificateItems(cl, testNow)
			if len(items) != len(ExpiringCAs(tc.certs, testNow)) || (len(items) > 0) != (c.Status == metav1.ConditionTrue) {
				t.Errorf("the items %+v disagree with the condition %+v", items, c)
			}
		})
	}
}

// The condition is looked at again when a CA enters its warning window and
// when it expires, not before.
func TestNextCertificateChange(t *testing.T) {
	certs := ichorv1alpha1.CertificatesStatus{TalosCAExpiry: in(40 * day), EtcdCAExpiry: in(35 * day)}
	if got := NextCertificateChange(certs, testNow); !got.Equal(testNow.Add(5 * day)) {
		t.Errorf("the etcd CA enters its window in 5 days: %v", got)
	}
	if got := NextCertificateChange(certs, testNow.Add(6*day)); !got.Equal(testNow.Add(10 * day)) {
		t.Errorf("then the Talos API CA in 10 days: %v", got)
	}
	if got := NextCertificateChange(certs, testNow.Add(36*day)); !got.Equal(testNow.Add(40 * day)) {
		t.Errorf("then the Talos API CA's expiry: %v", got)
	}
	if got := NextCertificateChange(certs, testNow.Add(41*day)); !got.IsZero() {
		t.Errorf("nothing ahead after both expired: %v", got)
	}
	if got := NextCertificateChange(ichorv1alpha1.CertificatesStatus{}, testNow); !got.IsZero() {
		t.Errorf("nothing recorded: %v", got)
	}
}
