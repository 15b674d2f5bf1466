package nodes

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The health lists each CA status.certificates records, the aggregator CA
// among them, and says which it does not record; Ichor's Talos client
// certificate is issued per connection, so its absence is not "missing",
// and a date status holds for it is still shown.
func TestCertificates(t *testing.T) {
	at := func(d time.Duration) *metav1.Time {
		return &metav1.Time{Time: time.Date(2036, 5, 1, 0, 0, 0, 0, time.UTC).Add(d)}
	}
	names := func(c *ichorv1alpha1.TalosCluster) ([]string, string) {
		list, missing := certificates(c)
		out := make([]string, 0, len(list))
		for _, e := range list {
			out = append(out, e.GetName()+"@"+e.GetExpiresAt().AsTime().Format(time.DateOnly))
		}

		return out, missing
	}

	c := &ichorv1alpha1.TalosCluster{}
	c.Status.Certificates = ichorv1alpha1.CertificatesStatus{
		TalosCAExpiry: at(0), KubernetesCAExpiry: at(0), EtcdCAExpiry: at(0), AggregatorCAExpiry: at(24 * time.Hour),
	}

	got, missing := names(c)
	want := []string{"Talos API CA@2036-05-01", "Kubernetes CA@2036-05-01", "etcd CA@2036-05-01", "Kubernetes aggregator CA@2036-05-02"}
	if strings.Join(got, ",") != strings.Join(want, ",") || missing != "" {
		t.Errorf("every CA recorded and no client certificate: %v, missing %q; want %v and nothing missing", got, missing, want)
	}

	c.Status.Certificates.ClientCertificateExpiry = at(time.Hour)
	if got, missing := names(c); len(got) != 5 || got[4] != "Ichor's Talos client certificate@2036-05-01" || missing != "" {
		t.Errorf("a client certificate status records is shown: %v, missing %q", got, missing)
	}

	c.Status.Certificates = ichorv1alpha1.CertificatesStatus{TalosCAExpiry: at(0)}
	got, missing = names(c)
	if len(got) != 1 || !strings.Contains(missing, "Kubernetes CA, etcd CA, Kubernetes aggregator CA") ||
		strings.Contains(missing, "client certificate") || strings.Contains(missing, "does not fill it in") {
		t.Errorf("the CAs status lacks are said missing, the client certificate is not: %v, %q", got, missing)
	}
}
