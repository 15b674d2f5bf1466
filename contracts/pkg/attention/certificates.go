package attention

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The rule for a cluster's certificate authorities that expire soon lives
// here once: the controller's CertificatesExpiring condition, the "Needs
// attention" items of the console and `ichor cluster get` all call
// ExpiringCAs, so they name the same CAs, the same dates and the same way out.

// CertificateWarning is how long before a cluster CA expires the list says so.
const CertificateWarning = 30 * 24 * time.Hour

// CA is one certificate authority of a cluster, as status.certificates
// records its expiry.
type CA struct {
	// Key names the CA in item keys: talos, kubernetes, etcd or aggregator.
	Key string
	// Name is the CA in plain language: "Talos API CA".
	Name string
	// NotAfter is when the CA expires.
	NotAfter time.Time
	// Rotatable says whether `ichor cluster rotate-ca` replaces this CA. It
	// replaces the Talos API CA and the Kubernetes CA (Talos's own rotation
	// covers those two) and, on request, the aggregator CA; the etcd CA
	// stays as it is in this release (Talos gives etcd no accepted CAs).
	Rotatable bool
}

// Expired reports whether the CA has expired at now.
func (ca CA) Expired(now time.Time) bool { return !ca.NotAfter.After(now) }

// Command is the command that rotates the CA of cluster, or "" when this
// release of Ichor cannot rotate it.
func (ca CA) Command(cluster string) string {
	if !ca.Rotatable {
		return ""
	}

	if ca.Key == "aggregator" {
		return "ichor cluster rotate-ca " + cluster + " --aggregator-only"
	}

	return "ichor cluster rotate-ca " + cluster
}

// WayOut says what to do about the CA before it expires: the command that
// rotates it, or that this release cannot rotate it.
func (ca CA) WayOut(cluster string) string {
	if cmd := ca.Command(cluster); cmd != "" {
		return "rotate it with `" + cmd + "`"
	}

	return "this release of Ichor cannot rotate the " + ca.Name
}

// CAs are the cluster CAs whose expiry certs records, in a fixed order. The
// client certificate is not one: Ichor issues it per connection, and it is
// renewed long before it could expire (clientCertificateExpiry stays empty).
func CAs(certs ichorv1alpha1.CertificatesStatus) []CA {
	var out []CA

	for _, ca := range []struct {
		key, name string
		at        *metav1.Time
		rotatable bool
	}{
		{"talos", "Talos API CA", certs.TalosCAExpiry, true},
		{"kubernetes", "Kubernetes CA", certs.KubernetesCAExpiry, true},
		{"etcd", "etcd CA", certs.EtcdCAExpiry, false},
		{"aggregator", "Kubernetes aggregator CA", certs.AggregatorCAExpiry, true},
	} {
		if ca.at == nil || ca.at.IsZero() {
			continue
		}

		out = append(out, CA{Key: ca.key, Name: ca.name, NotAfter: ca.at.UTC(), Rotatable: ca.rotatable})
	}

	return out
}

// ExpiringCAs are the CAs of certs that expire within CertificateWarning of
// now, or have expired, in the order of CAs.
func ExpiringCAs(certs ichorv1alpha1.CertificatesStatus, now time.Time) []CA {
	var out []CA

	for _, ca := range CAs(certs) {
		if ca.NotAfter.Sub(now) < CertificateWarning {
			out = append(out, ca)
		}
	}

	return out
}

// CertificatesCondition is the cluster's CertificatesExpiring condition at
// now: True (CertificatesExpiring, or CertificatesExpired once one has
// expired) naming each expiring CA, its not-after and its way out; False
// (CertificatesValid) otherwise. The message holds absolute dates only, so
// it does not change from one day to the next. The caller sets
// ObservedGeneration.
func CertificatesCondition(cluster string, certs ichorv1alpha1.CertificatesStatus, now time.Time) metav1.Condition {
	cond := metav1.Condition{Type: ichorv1alpha1.CertificatesExpiringCondition}

	expiring := ExpiringCAs(certs, now)
	if len(expiring) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason
		cond.Message = fmt.Sprintf("every certificate authority the cluster's status records is valid for more than %d days",
			int(CertificateWarning/(24*time.Hour)))

		return cond
	}

	cond.Status, cond.Reason = metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason

	parts := make([]string, 0, len(expiring))

	for _, ca := range expiring {
		verb := "expires at"
		if ca.Expired(now) {
			verb = "expired at"
			cond.Reason = ichorv1alpha1.CertificatesExpiredReason
		}

		parts = append(parts, fmt.Sprintf("the %s %s %s: %s", ca.Name, verb, ca.NotAfter.Format(time.RFC3339), ca.WayOut(cluster)))
	}

	cond.Message = strings.Join(parts, "; ")

	return cond
}

// NextCertificateChange is the first time after now at which
// CertificatesCondition can change for certs (a CA enters its warning window
// or expires); zero when none lies ahead.
func NextCertificateChange(certs ichorv1alpha1.CertificatesStatus, now time.Time) time.Time {
	var next time.Time

	for _, ca := range CAs(certs) {
		for _, at := range []time.Time{ca.NotAfter.Add(-CertificateWarning), ca.NotAfter} {
			if at.After(now) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}

	return next
}

// certificateItems are the cluster's CAs that expire within
// CertificateWarning of now (ExpiringCAs): a warning, an error once expired,
// with the command that rotates the CA when Ichor can.
func certificateItems(c *ichorv1alpha1.TalosCluster, now time.Time) []Item {
	expiring := ExpiringCAs(c.Status.Certificates, now)
	out := make([]Item, 0, len(expiring))

	for _, ca := range expiring {
		it := Item{
			Key: KindCluster + "/" + c.Name + "/Certificate/" + ca.Key, Kind: KindCluster, Subject: c.Name,
			Detail:  ca.Name + " not after " + ca.NotAfter.Format(time.RFC3339) + "; " + ca.WayOut(c.Name),
			Command: ca.Command(c.Name),
		}

		then := "rotate it before then"
		if !ca.Rotatable {
			then = "this release of Ichor cannot rotate it"
		}

		if ca.Expired(now) {
			it.Severity = Error
			it.Summary = fmt.Sprintf("the %s of cluster %s has expired", ca.Name, c.Name)
			if !ca.Rotatable {
				it.Summary += "; " + then
			}
			it.Since = ca.NotAfter
		} else {
			it.Severity = Warning
			it.Summary = fmt.Sprintf("the %s of cluster %s expires in %s; %s", ca.Name, c.Name, days(ca.NotAfter.Sub(now)), then)
		}

		out = append(out, it)
	}

	return out
}

// days is a duration in whole days, at least "1 day".
func days(d time.Duration) string {
	n := int(d / (24 * time.Hour))
	if n <= 1 {
		return "1 day"
	}

	return fmt.Sprintf("%d days", n)
}
