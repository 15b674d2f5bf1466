package webhook

import (
	"context"
	"errors"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const privilegedVerb = "`update` on `talosconfigpatches/privileged`"

func newPatch(ns, name string, docs ...mirror.PatchDocument) *ichorv1alpha1.TalosConfigPatch {
	return &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "c", Layer: ichorv1alpha1.LayerCluster, Documents: docs},
	}
}

func sysctlDoc() mirror.PatchDocument {
	return mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}}
}

func inlineManifestDoc() mirror.PatchDocument {
	return mirror.PatchDocument{KubeInlineManifestConfig: &mirror.KubeInlineManifestConfig{
		Name: "owned", Manifest: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n",
	}}
}

// Rule: creating a patch that carries privileged configuration needs
// `update` on talosconfigpatches/privileged (ichor-admin only).
func TestPrivilegedPatchCreateNeedsTheVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))

	err := operator.Create(ctx, newPatch(ns, "owned", sysctlDoc(), inlineManifestDoc()))
	refused(t, err, "Forbidden", "spec.documents[1].kubeInlineManifestConfig", "KubeInlineManifestConfig", "cluster-admin",
		`creating TalosConfigPatch "owned"`, privilegedVerb, `user "otto"`, "ichor-admin")
	err = operator.Create(ctx, newPatch(ns, "kubelet", mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{
		ExtraArgs: map[string]mirror.ArgValue{"authorization-mode": {Value: "AlwaysAllow"}},
	}}))
	refused(t, err, "Forbidden", "spec.documents[0].kubeletConfig.extraArgs", "KubeletConfig:extraArgs", privilegedVerb)
	if err := root.Get(ctx, client.ObjectKey{Namespace: ns, Name: "owned"}, &ichorv1alpha1.TalosConfigPatch{}); err == nil {
		t.Fatal("the refused patch was stored")
	}

	// The neighbours: an operator's plain patch (the kubelet's other fields
	// too), and the admin's privileged one.
	testenv.Must(t, operator.Create(ctx, newPatch(ns, "tuning", sysctlDoc(), mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{
		ClusterDNS: []string{"10.96.0.10"},
	}})))
	testenv.Must(t, admin.Create(ctx, newPatch(ns, "owned", sysctlDoc(), inlineManifestDoc())))
}

// Rule: changing a patch so that it carries privileged configuration, or
// changing one that does, needs the verb; a change of its metadata does not.
func TestPrivilegedPatchUpdateNeedsTheVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, operator.Create(ctx, newPatch(ns, "apiserver", mirror.PatchDocument{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{
		CertExtraSANs: []string{"api.example.com"},
	}})))
	testenv.Must(t, admin.Create(ctx, newPatch(ns, "owned", inlineManifestDoc())))

	err := update(t, operator, newPatch(ns, "apiserver"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Spec.Documents[0].KubeAPIServerConfig.Image = "registry.example.com/kube-apiserver:evil"
	})
	refused(t, err, "Forbidden", "spec.documents[0].kubeAPIServerConfig.image", "KubeAPIServerConfig:image",
		`changing TalosConfigPatch "apiserver"`, privilegedVerb, `user "otto"`)
	err = update(t, operator, newPatch(ns, "owned"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Spec.Documents[0].KubeInlineManifestConfig.Manifest = "kind: ConfigMap\n"
	})
	refused(t, err, "Forbidden", "spec.documents[0].kubeInlineManifestConfig", `changing TalosConfigPatch "owned"`, privilegedVerb)
	err = update(t, operator, newPatch(ns, "owned"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Spec.Documents = []mirror.PatchDocument{sysctlDoc()}
	})
	refused(t, err, "Forbidden", "spec.documents[0].kubeInlineManifestConfig (before the change)", privilegedVerb)

	// The neighbours: an operator's plain change of a plain patch, a label on
	// the admin's patch, and the admin's privileged change.
	testenv.Must(t, update(t, operator, newPatch(ns, "apiserver"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Spec.Documents[0].KubeAPIServerConfig.CertExtraSANs = []string{"api.example.org"}
	}))
	testenv.Must(t, update(t, operator, newPatch(ns, "owned"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Labels = map[string]string{"team": "platform"}
	}))
	testenv.Must(t, update(t, admin, newPatch(ns, "apiserver"), func(p *ichorv1alpha1.TalosConfigPatch) {
		p.Spec.Documents[0].KubeAPIServerConfig.Image = "registry.example.com/kube-apiserver:v1.37.2"
	}))
}

// Rule: deleting a patch that carries privileged configuration needs the
// verb while its cluster exists.
func TestPrivilegedPatchDeleteNeedsTheVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, admin.Create(ctx, newPatch(ns, "roots", mirror.PatchDocument{TrustedRootsConfig: &mirror.TrustedRootsConfig{Name: "corp"}})))
	testenv.Must(t, admin.Create(ctx, newPatch(ns, "env", mirror.PatchDocument{EnvironmentConfig: &mirror.EnvironmentConfig{
		Variables: map[string]string{"HTTPS_PROXY": "http://proxy:3128"},
	}})))
	testenv.Must(t, operator.Create(ctx, newPatch(ns, "tuning", sysctlDoc())))

	err := operator.Delete(ctx, newPatch(ns, "roots"))
	refused(t, err, "Forbidden", "spec.documents[0].trustedRootsConfig", "TrustedRootsConfig", `deleting TalosConfigPatch "roots"`, privilegedVerb, `user "otto"`)
	if err := root.Get(ctx, client.ObjectKey{Namespace: ns, Name: "roots"}, &ichorv1alpha1.TalosConfigPatch{}); err != nil {
		t.Fatalf("the refused delete removed the patch: %v", err)
	}

	// The neighbours: an operator deletes a plain patch, the admin a privileged one.
	testenv.Must(t, operator.Delete(ctx, newPatch(ns, "tuning")))
	testenv.Must(t, admin.Delete(ctx, newPatch(ns, "roots")))

	// Once the cluster is gone the patch reaches no node, and anyone who may
	// delete patches may clean it up.
	c := newCluster(ns, "c")
	testenv.Must(t, update(t, admin, c, func(c *ichorv1alpha1.TalosCluster) { allowDelete(c) }))
	testenv.Must(t, admin.Delete(ctx, c))
	testenv.Eventually(t, 0, "the cluster is gone", func() error {
		err := root.Get(ctx, client.ObjectKeyFromObject(c), &ichorv1alpha1.TalosCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("TalosCluster c still exists")
		}
		return err
	})
	testenv.Must(t, operator.Delete(ctx, newPatch(ns, "env")))
}

// Rule: starting a config rollout of a cluster with a privileged patch (one
// written before the rule existed, here by the cluster administrator) needs
// the verb.
func TestPrivilegedPatchRolloutNeedsTheVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "other")))
	testenv.Must(t, operator.Create(ctx, newPatch(ns, "tuning", sysctlDoc())))

	// No privileged patch yet: the rollout is an operator's.
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "before", ichorv1alpha1.OperationConfig)))

	// A patch written before the rule existed: root (system:masters) stands
	// for it, as the webhook would have let anyone through.
	testenv.Must(t, root.Create(ctx, newPatch(ns, "kubelet-image", mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{Image: "registry.example.com/kubelet:custom"}})))

	err := operator.Create(ctx, newOperation(ns, "after", ichorv1alpha1.OperationConfig))
	refused(t, err, "Forbidden", "spec.type", `config rollout of cluster "c"`, "kubelet-image (KubeletConfig:image)", privilegedVerb, `user "otto"`)

	// The neighbours: a rollout of another cluster and the admin's rollout.
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "other", ichorv1alpha1.OperationConfig, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.ClusterName = "other"
	})))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "after", ichorv1alpha1.OperationConfig)))
}

// Rule: only ichor-admin holds the verb; the controller's and ichor-ui's own
// identities do not (the controller never writes patches or starts a config
// rollout, and ichor-ui acts as the signed-in user).
func TestPrivilegedPatchVerbIsAdminOnly(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		user   string
		groups []string
		want   bool
	}{
		{"matrix-admin", []string{"ichor:admin", "system:authenticated"}, true},
		{"matrix-operator", []string{"ichor:operator", "system:authenticated"}, false},
		{"system:serviceaccount:ichor-system:ichor-controller", []string{"system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated"}, false},
		{"system:serviceaccount:ichor-system:ichor-ui", []string{"system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: tc.user, Groups: tc.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "team-a", Verb: guard.VerbUpdate, Group: ichorv1alpha1.Group,
				Resource: guard.ResourceTalosConfigPatches, Subresource: guard.SubresourcePrivileged,
			},
		}}
		testenv.Must(t, root.Create(ctx, sar))
		if sar.Status.Allowed != tc.want {
			t.Errorf("%s may update talosconfigpatches/privileged: %v, want %v", tc.user, sar.Status.Allowed, tc.want)
		}
	}
}
