package issuer_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
)

// Sign-ins are counted by outcome: a wrong password, then the right one;
// the external provider's series do not exist without a provider.
func TestSignInsCounted(t *testing.T) {
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	iss, err := issuer.New(issuer.Options{
		Tokens:   &auth.Tokens{Issuer: "https://issuer.test", Key: key},
		Users:    &memUsers{users: map[string]*memUser{"alice": {password: "alice-password", groups: []string{"ichor:admin"}}}},
		Clients:  []issuer.Client{{ID: clientID, RedirectURIs: []string{redirect}}},
		Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	iss.Mount(r)
	w := &world{srv: newTLS(t, r)}

	count := func(outcome string) float64 {
		t.Helper()
		v, err := testutil.GatherAndCount(reg, "ichor_ui_sign_ins_total")
		if err != nil || v == 0 {
			t.Fatalf("ichor_ui_sign_ins_total is not registered: %v", err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["method"] == issuer.MethodOIDC {
					t.Fatalf("an oidc series without a provider: %v", labels)
				}
				if labels["method"] == issuer.MethodPassword && labels["outcome"] == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no password series for outcome %s", outcome)
		return 0
	}
	if count(issuer.OutcomeSuccess) != 0 || count(issuer.OutcomeBadCredentials) != 0 {
		t.Fatal("the counters start at zero")
	}

	c := w.browser(t)
	_, challenge := newVerifier()
	page := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(challenge, "S256").Encode(), nil)
	m := requestField.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no login form: %d", page.status)
	}
	if resp := do(t, c, http.MethodPost, w.srv.URL+issuer.LoginPath, url.Values{"request": {m[1]}, "username": {"alice"}, "password": {"wrong"}}); resp.status != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d", resp.status)
	}
	if count(issuer.OutcomeBadCredentials) != 1 || count(issuer.OutcomeSuccess) != 0 {
		t.Fatalf("after a wrong password: bad_credentials %v, success %v", count(issuer.OutcomeBadCredentials), count(issuer.OutcomeSuccess))
	}
	w.code(t, c, "alice", "alice-password", challenge)
	if count(issuer.OutcomeSuccess) != 1 {
		t.Fatalf("after a sign-in: success %v", count(issuer.OutcomeSuccess))
	}
}

func newTLS(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv
}
