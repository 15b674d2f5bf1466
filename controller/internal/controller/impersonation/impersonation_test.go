package impersonation_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/controller/impersonation"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite installs Ichor's RBAC from kustomize/base/rbac as shipped and
// runs the reconciler as the controller's ServiceAccount (so its own rights,
// escalate included, are the ones under test); impersonation is tried as
// ichor-ui's ServiceAccount.
const (
	ns             = "ichor-system"
	controllerUser = "system:serviceaccount:ichor-system:ichor-controller"
	uiUser         = "system:serviceaccount:ichor-system:ichor-ui"
	extraUser      = "oidc:olga"
	waitTimeout    = 60 * time.Second
)

var (
	suite *testenv.Suite
	admin client.Client
	uiCfg *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		suite, admin = s, s.Env.Client
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
		if err := s.Env.ApplyDir(ctx, "kustomize/base/rbac"); err != nil {
			return nil, err
		}
		sa := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
		var err error
		if uiCfg, err = s.Env.UserConfig(uiUser, sa...); err != nil {
			return nil, err
		}
		ctrlCfg, err := s.Env.UserConfig(controllerUser, sa...)
		if err != nil {
			return nil, err
		}
		mgr, err := ctrl.NewManager(ctrlCfg, ctrl.Options{
			Scheme: s.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		})
		if err != nil {
			return nil, err
		}
		r := &impersonation.Reconciler{Namespace: ns, ExtraUsers: []string{extraUser}}
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, err
		}
		return nil, testenv.StartManager(ctx, mgr)
	}))
}

// impersonate asks the API server who ichor-ui is while impersonating user
// in groups; a refusal is the API server's Forbidden.
func impersonate(t *testing.T, user string, groups ...string) error {
	t.Helper()
	cfg := rest.CopyConfig(uiCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(context.Background(), review); err != nil {
		return err
	}
	if got := review.Status.UserInfo.Username; got != user {
		t.Fatalf("impersonating %s, the API server saw %s", user, got)
	}
	return nil
}

func refused(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("ichor-ui may impersonate %s", what)
	}
	if !apierrors.IsForbidden(err) {
		t.Fatalf("impersonating %s: want Forbidden, got %v", what, err)
	}
}

func user(name string) *ichorv1alpha1.IchorUser {
	return &ichorv1alpha1.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.IchorUserSpec{DisplayName: name, Roles: []string{ichorv1alpha1.UserRoleViewer}},
	}
}

// Never a system identity, nor a name the controller does not list; a listed
// user with a built-in group works.
func TestImpersonationBoundedRefusesSystemIdentities(t *testing.T) {
	ctx := context.Background()
	if err := admin.Create(ctx, user("sam")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, user("sam")) })
	testenv.Eventually(t, 0, "the listed user ichor:sam", func() error { return impersonate(t, "ichor:sam", "ichor:viewer") })

	refused(t, impersonate(t, "system:kube-controller-manager"), "system:kube-controller-manager")
	refused(t, impersonate(t, "system:admin", "system:masters"), "system:admin in system:masters")
	refused(t, impersonate(t, "ichor:sam", "system:masters"), "a listed user in the group system:masters")
	refused(t, impersonate(t, "ichor:mallory"), "ichor:mallory, who is no IchorUser")
	refused(t, impersonate(t, "oidc:someone-else"), "an oidc: user the deployment does not name")
	if err := impersonate(t, extraUser, "ichor:operator"); err != nil {
		t.Fatalf("the chart's user %s: %v", extraUser, err)
	}
}

// A new IchorUser is added, a disabled or deleted one is removed again.
func TestImpersonationBoundedFollowsIchorUsers(t *testing.T) {
	ctx := context.Background()
	refused(t, impersonate(t, "ichor:nina", "ichor:viewer"), "ichor:nina before the IchorUser exists")
	u := user("nina")
	if err := admin.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, "ichor:nina after her IchorUser was created", func() error { return impersonate(t, "ichor:nina", "ichor:viewer") })

	u.Spec.Disabled = true
	if err := admin.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, "ichor:nina refused once disabled", func() error { return wantRefused(t, "ichor:nina") })
	// The others stay: a neighbour.
	if err := impersonate(t, extraUser); err != nil {
		t.Fatalf("%s after disabling nina: %v", extraUser, err)
	}

	u.Spec.Disabled = false
	if err := admin.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, "ichor:nina again once enabled", func() error { return impersonate(t, "ichor:nina") })
	if err := admin.Delete(ctx, u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, "ichor:nina refused once deleted", func() error { return wantRefused(t, "ichor:nina") })
}

func wantRefused(t *testing.T, name string) error {
	t.Helper()
	err := impersonate(t, name)
	if err == nil {
		return fmt.Errorf("%s may still be impersonated", name)
	}
	if !apierrors.IsForbidden(err) {
		return err
	}
	return nil
}

// An IchorUser of another namespace is not one of Ichor's users.
func TestImpersonationBoundedIgnoresOtherNamespaces(t *testing.T) {
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	other := user("otto")
	other.Namespace = "elsewhere"
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	// A positive marker after otto: a user of the namespace is listed.
	marker := user("mark")
	if err := admin.Create(ctx, marker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, marker) })
	testenv.Eventually(t, 0, "ichor:mark", func() error { return impersonate(t, "ichor:mark") })
	refused(t, impersonate(t, "ichor:otto"), "ichor:otto, an IchorUser outside the install namespace")
}

// With no user at all the rule names only the placeholder: an empty
// resourceNames list would allow every name.
func TestImpersonationBoundedNoUsersGrantsNothing(t *testing.T) {
	if got := impersonation.Users(nil, nil); !slices.Equal(got, []string{impersonation.Placeholder}) {
		t.Fatalf("Users(nil, nil) = %v, want only the placeholder", got)
	}
	ctx := context.Background()
	const role, emptyNS = "test-empty-impersonation", "no-users"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: emptyNS}}); err != nil {
		t.Fatal(err)
	}
	// A role like the shipped one, but empty-handed at first, bound to a test user.
	if err := admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "empty-handed"}},
	}); err != nil {
		t.Fatal(err)
	}
	r := &impersonation.Reconciler{Client: admin, Reader: admin, Namespace: emptyNS, RoleName: role}
	if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	got := &rbacv1.ClusterRole{}
	if err := admin.Get(ctx, client.ObjectKey{Name: role}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rules) != 1 || !slices.Equal(got.Rules[0].ResourceNames, []string{impersonation.Placeholder}) {
		t.Fatalf("rules with no user: %+v", got.Rules)
	}
	cfg, err := suite.Env.UserConfig("empty-handed")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "ichor:anyone"}
	c, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Create(ctx, &authenticationv1.SelfSubjectReview{})
	refused(t, err, "ichor:anyone through a role with no users")
}

// The flag takes ichor:<name> and oidc:<name> only.
func TestImpersonationBoundedExtraUsersChecked(t *testing.T) {
	for _, bad := range []string{"system:admin", "alice", "oidc:", "ichor:a:b", "system:serviceaccount:x:y"} {
		err := impersonation.CheckExtraUser(bad)
		if err == nil || !strings.Contains(err.Error(), "ichor:<name> or oidc:<name>") {
			t.Errorf("CheckExtraUser(%q) = %v, want a refusal naming the accepted forms", bad, err)
		}
	}
	for _, good := range []string{"oidc:alice", "ichor:bob"} {
		if err := impersonation.CheckExtraUser(good); err != nil {
			t.Errorf("CheckExtraUser(%q) = %v", good, err)
		}
	}
}
