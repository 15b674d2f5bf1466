package download

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/credential"
)

// signed is a request the controller answered: its key's public half signed
// by a fresh bundle's Talos API CA for os:reader.
func signed(t *testing.T, k *TalosconfigKey) (*ichorv1alpha1.TalosCredentialRequest, *secrets.Bundle) {
	t.Helper()

	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}

	pub, err := credential.ParsePublicKey(k.PublicPEM)
	if err != nil {
		t.Fatal(err)
	}

	c, err := credential.Sign(b, pub, role.Reader, "alice", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	tcr := TalosconfigRequest("ichor-system", "prod", "talosconfig-", k, time.Hour)
	tcr.Name = "talosconfig-x"
	tcr.Status = ichorv1alpha1.TalosCredentialRequestStatus{
		Certificate: string(c.PEM), CA: string(c.CA), Role: string(c.Role),
		Conditions: []metav1.Condition{{Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue}},
	}

	return tcr, b
}

func TestTalosconfigHoldsTheSignedReaderCertificate(t *testing.T) {
	k, err := NewTalosconfigKey()
	if err != nil {
		t.Fatal(err)
	}

	tcr, b := signed(t, k)
	if tcr.Spec.Purpose != ichorv1alpha1.PurposeTalosconfigReader || tcr.Spec.Duration.Duration != time.Hour || tcr.Spec.PublicKey != k.PublicPEM {
		t.Fatalf("request: %+v", tcr.Spec)
	}

	if done, err := Answered(tcr); !done || err != nil {
		t.Fatalf("Answered(signed) = %v, %v", done, err)
	}

	data, err := k.Talosconfig("prod", []string{"10.5.0.2", "10.5.0.3:50001"}, tcr)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		t.Fatalf("the talosconfig does not parse as talosctl reads it: %v", err)
	}

	ctx := cfg.Contexts[cfg.Context]
	if cfg.Context != "prod" || ctx == nil || strings.Join(ctx.Endpoints, ",") != "10.5.0.2,10.5.0.3:50001" {
		t.Fatalf("context %q: %+v", cfg.Context, ctx)
	}

	if ctx.CA == "" || !strings.Contains(string(data), "ca: ") {
		t.Fatal("no CA in the talosconfig")
	}

	pair, err := tls.X509KeyPair(decode(t, ctx.Crt), decode(t, ctx.Key))
	if err != nil {
		t.Fatalf("the talosconfig's certificate and key are not a pair: %v", err)
	}

	if pair.Leaf == nil || len(pair.Leaf.Subject.Organization) != 1 || pair.Leaf.Subject.Organization[0] != string(role.Reader) {
		t.Fatalf("certificate organization: %v, want [os:reader]", pair.Leaf.Subject.Organization)
	}

	if string(decode(t, ctx.CA)) != string(b.Certs.OS.Crt) {
		t.Fatal("the talosconfig's CA is not the cluster's Talos API CA")
	}

	// a certificate for another key is refused, not written out
	other, err := NewTalosconfigKey()
	if err != nil {
		t.Fatal(err)
	}

	if _, err := other.Talosconfig("prod", nil, tcr); err == nil || !strings.Contains(err.Error(), "does not match the key") {
		t.Fatalf("another key's talosconfig: %v", err)
	}

	bad := tcr.DeepCopy()
	bad.Status.CA = "not a certificate"

	if _, err := k.Talosconfig("prod", nil, bad); err == nil || !strings.Contains(err.Error(), "CA of TalosCredentialRequest talosconfig-x") {
		t.Fatalf("bad CA: %v", err)
	}
}

func decode(t *testing.T, b64 string) []byte {
	t.Helper()

	b, err := base64Decode(b64)
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func TestAnswered(t *testing.T) {
	tcr := &ichorv1alpha1.TalosCredentialRequest{ObjectMeta: metav1.ObjectMeta{Name: "r"}}
	if done, err := Answered(tcr); done || err != nil {
		t.Fatalf("unanswered: %v, %v", done, err)
	}

	tcr.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue}}
	if done, _ := Answered(tcr); done {
		t.Fatal("Issued without a certificate counted as answered")
	}

	tcr.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionTrue, Message: "TalosCluster \"x\" not found"}}

	done, err := Answered(tcr)
	if !done || !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), `TalosCluster "x" not found`) || !strings.Contains(err.Error(), "TalosCredentialRequest r") {
		t.Fatalf("denied: %v, %v", done, err)
	}
}

func TestValidTalosconfigDuration(t *testing.T) {
	if d, err := ValidTalosconfigDuration(0); d != time.Hour || err != nil {
		t.Fatalf("default: %s, %v", d, err)
	}

	if d, err := ValidTalosconfigDuration(12 * time.Hour); d != 12*time.Hour || err != nil {
		t.Fatalf("12h: %s, %v", d, err)
	}

	for _, d := range []time.Duration{13 * time.Hour, time.Second, -time.Hour} {
		if _, err := ValidTalosconfigDuration(d); err == nil || !strings.Contains(err.Error(), "lasts 1m to 12h") {
			t.Errorf("%s: %v", d, err)
		}
	}
}

func TestTalosconfigEndpoints(t *testing.T) {
	m := func(name, cluster, role, stage, addr string, deleting bool) ichorv1alpha1.TalosMachine {
		tm := ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: name}}
		tm.Spec.ClusterName, tm.Spec.Role, tm.Spec.Address, tm.Status.Stage = cluster, role, addr, stage

		if deleting {
			now := metav1.Now()
			tm.DeletionTimestamp = &now
		}

		return tm
	}
	cp, run := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.StageRunning
	all := []ichorv1alpha1.TalosMachine{
		m("cp-2", "prod", cp, run, "10.0.0.3", false),
		m("cp-1", "prod", cp, run, "10.0.0.2", false),
		m("w-1", "prod", ichorv1alpha1.RoleWorker, run, "10.0.0.9", false),
		m("cp-3", "prod", cp, ichorv1alpha1.StageInstalling, "10.0.0.4", false),
		m("cp-4", "prod", cp, run, "10.0.0.5", true),
		m("cp-x", "other", cp, run, "10.1.0.2", false),
		m("cp-5", "prod", cp, run, "", false),
	}

	if got := strings.Join(TalosconfigEndpoints(all, "prod", 0), ","); got != "10.0.0.2,10.0.0.3" {
		t.Errorf("port 0: %s", got)
	}

	if got := strings.Join(TalosconfigEndpoints(all, "prod", 50000), ","); got != "10.0.0.2,10.0.0.3" {
		t.Errorf("port 50000: %s", got)
	}

	if got := strings.Join(TalosconfigEndpoints(all, "prod", 50123), ","); got != "10.0.0.2:50123,10.0.0.3:50123" {
		t.Errorf("port 50123: %s", got)
	}
}

func TestTalosconfigEventMessage(t *testing.T) {
	exp := time.Date(2026, 12, 3, 12, 0, 0, 0, time.FixedZone("x", 3600))
	if got := TalosconfigEventMessage("alice", "prod", exp); got != "alice downloads an os:reader talosconfig of cluster prod, valid until 2026-12-03T11:00:00Z" {
		t.Fatal(got)
	}
}

func base64Decode(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
