package webhook

import (
	"context"
	"fmt"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// access is one cell of the role × verb matrix.
type access struct {
	verb, group, resource, subresource string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" && a.group != ichorv1alpha1.Group {
		r += "." + a.group
	}
	return a.verb + " " + r
}

func ichor(verb, resource string, sub ...string) access {
	a := access{verb: verb, group: ichorv1alpha1.Group, resource: resource}
	if len(sub) > 0 {
		a.subresource = sub[0]
	}
	return a
}

// TestRoleVerbMatrix asks the API server, with a SubjectAccessReview per cell,
// what each built-in role may do, as a member of its group
// (ichor:viewer|operator|admin) and as a user bound to the unbound
// ichor-machine-reclaimer. The expected matrix is the contract of the
// architecture's "Trust" section.
func TestRoleVerbMatrix(t *testing.T) {
	ctx := context.Background()
	testenv.Must(t, root.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metaName("test-matrix-reclaimer"),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-machine-reclaimer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "matrix-reclaimer"}},
	}))
	testenv.Must(t, root.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metaName("test-matrix-rotation"),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: guard.RotationCredentialsRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "matrix-rotation"}},
	}))

	const (
		viewerRole, operatorRole, adminRole, reclaimerRole, rotationRole = "viewer", "operator", "admin", "reclaimer", "rotation"
	)
	roles := []string{viewerRole, operatorRole, adminRole, reclaimerRole, rotationRole}
	// Each cell lists the roles that hold it; every other role must be denied.
	matrix := []struct {
		a    access
		held []string
	}{
		{ichor("get", "talosclusters"), []string{viewerRole, operatorRole, adminRole}},
		{ichor("list", "talosmachines"), []string{viewerRole, operatorRole, adminRole}},
		{ichor("watch", "talosoperations"), []string{viewerRole, operatorRole, adminRole}},
		{ichor("get", "ichorinstallations"), []string{viewerRole, operatorRole, adminRole}},
		{ichor("update", "talosclusters"), []string{operatorRole, adminRole}},
		{ichor("create", "talosconfigpatches"), []string{operatorRole, adminRole}},
		{ichor("create", "talosoperations"), []string{operatorRole, adminRole}},
		{ichor("delete", "talosmachines"), []string{operatorRole, adminRole}},
		{ichor("delete", "talosclusters"), []string{adminRole}},
		{ichor("create", "ichorusers"), []string{adminRole}},
		{ichor(guard.VerbApprove, "talosmachines", guard.SubresourceApproval), []string{operatorRole, adminRole}},
		{ichor(guard.VerbOverride, "talosclusters"), []string{adminRole}},
		{ichor("update", "talosmachines", guard.SubresourceTrust), []string{adminRole}},
		{ichor("update", "talosclusters", guard.SubresourceSecretReferences), []string{adminRole}},
		{ichor("update", "talosclusters", guard.SubresourceCiliumValues), []string{adminRole}},
		{ichor("update", "talosclusters", guard.SubresourceAuthentication), []string{adminRole}},
		{ichor("update", "talosetcdbackups", guard.SubresourceSecretReferences), []string{adminRole}},
		{ichor("update", "talosconfigpatches", guard.SubresourcePrivileged), []string{adminRole}},
		{ichor("update", "ichorinstallations", guard.SubresourceVersion), []string{adminRole}},
		{ichor("update", "ichorinstallations", guard.SubresourceSettings), []string{adminRole}},
		{ichor(guard.VerbShutdown, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbRotateCA, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbRotateKeys, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbRestoreEtcd, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbResetNode, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbShutdownNode, "talosoperations"), []string{adminRole}},
		{ichor(guard.VerbDownload, "talosclusters", guard.SubresourceTalosconfigReader), []string{operatorRole, adminRole}},
		{ichor(guard.VerbDownload, "talosclusters", guard.SubresourceSupportBundle), []string{adminRole}},
		{ichor(guard.VerbDownload, "talosclusters", guard.SubresourceEtcdSnapshot), []string{adminRole}},
		{ichor(guard.VerbDownload, "talosclusters", guard.SubresourcePacketCapture), []string{adminRole}},
		// granted to nobody by default: only a binding of ichor-ca-rotation-credentials
		{ichor(guard.VerbDownload, "talosclusters", guard.SubresourceCredentials), []string{rotationRole}},
		{ichor("create", "taloscredentialrequests"), []string{operatorRole, adminRole, rotationRole}},
		{ichor("create", "machinereclaims"), []string{adminRole, reclaimerRole}},
		{ichor("update", "machinereclaims"), []string{adminRole, reclaimerRole}},
		{ichor(guard.VerbReclaim, "machinereclaims"), []string{adminRole, reclaimerRole}},
		{ichor("delete", "machinereclaims"), nil},
		// ichor-ui's sign-in sessions are its own (Role ichor-ui-sessions).
		{ichor("get", "ichoruisessions"), nil},
		{ichor("update", "ichoruisessions"), nil},
		// Never granted: Secrets, impersonation, anything cluster-admin-like.
		{access{verb: "get", resource: "secrets"}, nil},
		{access{verb: "list", resource: "secrets"}, nil},
		{access{verb: "create", resource: "secrets"}, nil},
		{access{verb: "impersonate", resource: "users"}, nil},
		{access{verb: "impersonate", resource: "groups"}, nil},
		{access{verb: "impersonate", resource: "serviceaccounts"}, nil},
		{access{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"}, nil},
		{access{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles"}, nil},
		{access{verb: "delete", resource: "nodes"}, nil},
		{access{verb: "*", group: "*", resource: "*"}, nil},
	}
	subjects := map[string]authorizationv1.SubjectAccessReviewSpec{
		viewerRole:    {User: "matrix-viewer", Groups: []string{"ichor:viewer", "system:authenticated"}},
		operatorRole:  {User: "matrix-operator", Groups: []string{"ichor:operator", "system:authenticated"}},
		adminRole:     {User: "matrix-admin", Groups: []string{"ichor:admin", "system:authenticated"}},
		reclaimerRole: {User: "matrix-reclaimer", Groups: []string{"system:authenticated"}},
		rotationRole:  {User: "matrix-rotation", Groups: []string{"system:authenticated"}},
	}
	for _, cell := range matrix {
		for _, role := range roles {
			t.Run(fmt.Sprintf("%s/%s", role, cell.a), func(t *testing.T) {
				spec := subjects[role]
				spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
					Namespace: "team-a", Verb: cell.a.verb, Group: cell.a.group, Resource: cell.a.resource, Subresource: cell.a.subresource,
				}
				sar := &authorizationv1.SubjectAccessReview{Spec: spec}
				testenv.Must(t, root.Create(ctx, sar))
				if want := slices.Contains(cell.held, role); sar.Status.Allowed != want {
					t.Errorf("%s may %s: got %v, want %v (%s)", role, cell.a, sar.Status.Allowed, want, sar.Status.Reason)
				}
			})
		}
	}
}

// TestBuiltInRolesGrantNoWildcardsSecretsOrImpersonation reads the installed
// ClusterRoles themselves: no rule names secrets, impersonate or a wildcard,
// and outside ichor.maesh.dev a role only reads the Nodes, the pods on them
// and Events (the console's health and Kubernetes tab, the level of
// Kubernetes' own view role without its Secrets).
func TestBuiltInRolesGrantNoWildcardsSecretsOrImpersonation(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"ichor-viewer", "ichor-operator", "ichor-admin", "ichor-machine-reclaimer", guard.RotationCredentialsRole} {
		role := &rbacv1.ClusterRole{}
		testenv.Must(t, root.Get(ctx, client.ObjectKey{Name: name}, role))
		if len(role.Rules) == 0 {
			t.Fatalf("%s has no rules", name)
		}
		for _, r := range role.Rules {
			for _, v := range r.Verbs {
				if v == "*" || v == "impersonate" || v == "escalate" || v == "bind" {
					t.Errorf("%s grants the verb %q", name, v)
				}
			}
			for _, res := range r.Resources {
				if res == "*" || res == "secrets" {
					t.Errorf("%s grants the resource %q", name, res)
				}
			}
			for _, g := range r.APIGroups {
				if g == ichorv1alpha1.Group {
					continue
				}
				if g != "" {
					t.Errorf("%s reaches outside ichor.maesh.dev: %q", name, g)
				}
				for _, res := range r.Resources {
					if !slices.Contains([]string{"nodes", "pods", "events"}, res) {
						t.Errorf("%s reaches the core resource %q", name, res)
					}
				}
				for _, v := range r.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) {
						t.Errorf("%s may %s core resources %v: only reading is granted outside ichor.maesh.dev", name, v, r.Resources)
					}
				}
			}
		}
	}
	// ichor-machine-reclaimer and ichor-ca-rotation-credentials are bound
	// to nobody by the base manifests.
	bindings := &rbacv1.ClusterRoleBindingList{}
	testenv.Must(t, root.List(ctx, bindings))
	for _, b := range bindings.Items {
		if b.RoleRef.Name == "ichor-machine-reclaimer" && !slices.Contains([]string{"test-rita", "test-matrix-reclaimer"}, b.Name) {
			t.Errorf("ichor-machine-reclaimer is bound by %s", b.Name)
		}
		if b.RoleRef.Name == guard.RotationCredentialsRole && b.Name != "test-matrix-rotation" {
			t.Errorf("%s is bound by %s", guard.RotationCredentialsRole, b.Name)
		}
	}
}
