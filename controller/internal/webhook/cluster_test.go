package webhook

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// Rule: control-plane count in {1, 3, 5}.
func TestControlPlaneCountIsOneThreeOrFive(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, n := range []int32{2, 4} {
		err := admin.Create(ctx, newCluster(ns, "even", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = n }))
		refused(t, err, "Invalid", "spec.controlPlane.count", "must be 1, 3 or 5", "set spec.controlPlane.count to 1, 3 or 5")
	}
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "three", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 3 })))
	// A change to an even count is refused too.
	err := update(t, admin, newCluster(ns, "three"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 4 })
	refused(t, err, "Invalid", "spec.controlPlane.count")
	testenv.Must(t, update(t, admin, newCluster(ns, "three"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 5 }))
}

// Rule: control planes are not made unschedulable with zero workers; a
// cluster is created tainted (the standard preset) before any machine exists.
func TestUnschedulableControlPlanesNeedAWorker(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "tainted", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) })))

	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	err := update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) })
	refused(t, err, "Invalid", "spec.controlPlane.schedulable", "no approved worker", "approve a worker first")

	testenv.Must(t, root.Create(ctx, newMachine(ns, "w1", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) }))
}

// Rule: CNI preset cilium; unmanaged only with the adoption annotation.
func TestUnmanagedCNIOnlyForAdoptedClusters(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	unmanaged := func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
	}
	err := admin.Create(ctx, newCluster(ns, "c", unmanaged))
	refused(t, err, "Invalid", "spec.cni.preset", "only for adopted clusters", ichorv1alpha1.AdoptedAnnotation)

	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", unmanaged, func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}
	})))
}

// Rule: CNI preset immutable, tunnel immutable once set, subnets fixed once set
// (CEL rules of the CRD, enforced by the API server itself).
func TestCNIAndSubnetsAreImmutable(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Tunnel = "" })))

	err := update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged
		c.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}
	})
	refused(t, err, "Invalid", "spec.cni.preset is immutable", "means a new cluster")

	// The tunnel may be set once, then it is fixed.
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Tunnel = "geneve" }))
	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Tunnel = "vxlan" })
	refused(t, err, "Invalid", "spec.cni.tunnel is immutable once set")

	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.PodSubnets = []string{"10.10.0.0/16"} })
	refused(t, err, "Invalid", "spec.network.podSubnets is fixed once set")
	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.ServiceSubnets = nil })
	refused(t, err, "Invalid", "spec.network.serviceSubnets is fixed once set")

	// A cluster without subnets may set them once.
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "d", func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network = ichorv1alpha1.ClusterNetwork{} })))
	testenv.Must(t, update(t, admin, newCluster(ns, "d"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.PodSubnets = []string{"10.10.0.0/16"} }))
}

// Rule: spec.cni.kubeProxy changes only on a write whose annotation names
// the new mode, and only on a cluster whose Cilium is Ichor's release and
// whose Talos side is recorded (the controller then runs the ordered switch).
func TestKubeProxySwitchNeedsTheAnnotation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	err := update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced })
	refused(t, err, "Invalid", "spec.cni.kubeProxy", "asked for explicitly", "ichor cni kube-proxy replaced --cluster c")

	annotated := func(v string) func(c *ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
			c.Annotations = map[string]string{ichorv1alpha1.KubeProxySwitchAnnotation: v}
		}
	}
	err = update(t, operator, newCluster(ns, "c"), annotated("true"))
	refused(t, err, "Invalid", "spec.cni.kubeProxy", `says "true", not "replaced"`)

	err = update(t, operator, newCluster(ns, "c"), annotated(ichorv1alpha1.KubeProxyReplaced))
	refused(t, err, "Invalid", "spec.cni.kubeProxy", "status.cni.kubeProxy is empty", "not Ichor's Helm release yet")

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "c"}, c))
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionTrue,
		Reason: ichorv1alpha1.CNIHandoverDoneReason, Message: "test"})
	c.Status.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	testenv.Must(t, root.Status().Update(ctx, c))
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), annotated(ichorv1alpha1.KubeProxyReplaced)))

	// The switch is pending (Talos's side still enabled): putting spec back
	// to enabled calls it off, which is always allowed.
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled
		c.Annotations = map[string]string{ichorv1alpha1.KubeProxySwitchAnnotation: ichorv1alpha1.KubeProxyEnabled}
	}))
}

// Rule: TalosCluster deletable only with allow-delete: "true".
func TestClusterDeletionNeedsAllowDelete(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := newCluster(ns, "c")
	testenv.Must(t, admin.Create(ctx, c))
	refused(t, admin.Delete(ctx, c), "Invalid", "metadata.annotations[ichor.maesh.dev/allow-delete]", "protected against deletion",
		`set the annotation ichor.maesh.dev/allow-delete: "true" first`)
	testenv.Must(t, update(t, admin, c, allowDeleteCluster))
	testenv.Must(t, admin.Delete(ctx, c))
}

func allowDeleteCluster(c *ichorv1alpha1.TalosCluster) { allowDelete(c) }

// Rule: versions — never a downgrade, never a refused upgrade step, Kubernetes
// at most one minor up, and a pair the compatibility table refuses only with override.
func TestVersionsAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.0"
		c.Spec.KubernetesVersion = "1.36.4"
	})))

	err := update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.13.4" })
	refused(t, err, "Invalid", "spec.talosVersion", "downgrade", "a downgrade is never admitted")

	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.36.1" })
	refused(t, err, "Invalid", "spec.kubernetesVersion", "downgrade")

	// Allowed neighbours: a Talos patch and one Kubernetes minor.
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.1" }))
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.37.2" }))

	// 1.37 -> 1.38 is one minor, but Talos 1.14 does not support 1.38: an
	// operator is refused, an admin (override) passes with a warning.
	err = update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.38.0" })
	refused(t, err, "Invalid", "spec.kubernetesVersion", "incompatible pair", "override")
	adminWarnings.take()
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.38.0" }))
	if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "override by ada") || !strings.Contains(w, "incompatible pair") {
		t.Errorf("the override must be reported as a warning, got %q", w)
	}
	waitForOverrideEvent(t, ns, "c", "ada overrode")

	// Skipping a minor is refused even for an admin: override does not pass it.
	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.40.0" })
	refused(t, err, "Invalid", "spec.kubernetesVersion", "skips a minor")

	// A Talos step below the minimum host version of its target is refused.
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "old", func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.11.5"
		c.Spec.VersionContract = "v1.11"
		c.Spec.KubernetesVersion = "1.34.0"
	})))
	err = update(t, admin, newCluster(ns, "old"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.1" })
	refused(t, err, "Invalid", "spec.talosVersion", "upgrade path refused", "too old to upgrade")
}

// Rule: the Kubernetes ↔ Cilium pair (release.CheckCiliumPair through
// guard.CheckCiliumPair) on every write of spec.kubernetesVersion: a create
// against the Cilium Ichor installs, a change against the one the stored
// status says runs; a Kubernetes the Cilium does not support is refused with
// the way out, and only the override verb passes it (recorded).
func TestKubernetesCiliumPair(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)

	// Talos v1.14 runs Kubernetes 1.32, the pinned Cilium does not.
	err := operator.Create(ctx, newCluster(ns, "new", func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" }))
	refused(t, err, "Invalid", "spec.kubernetesVersion", "cilium "+release.DefaultCiliumVersion+" supports kubernetes 1.33",
		"the Cilium this Ichor installs", "choose a Kubernetes version Cilium "+release.DefaultCiliumVersion+" supports", "override")

	// Clusters that run Kubernetes 1.31 on Talos v1.13 (an admin's override
	// let them in, with a warning), their Cilium as the controller read it.
	old := func(name, cilium string) {
		adminWarnings.take()
		testenv.Must(t, admin.Create(ctx, newCluster(ns, name, func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.TalosVersion, c.Spec.VersionContract, c.Spec.KubernetesVersion = "v1.13.4", "v1.13", "1.31.4"
		})))
		if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "override by ada") || !strings.Contains(w, "supports kubernetes 1.33") {
			t.Errorf("the override of the Cilium pair must be reported as a warning, got %q", w)
		}
		testenv.UpdateStatus(t, root, newCluster(ns, name), func(c *ichorv1alpha1.TalosCluster) { c.Status.CNI.CiliumVersion = cilium })
	}
	old("runs-1-20", "v1.20.2")

	err = update(t, operator, newCluster(ns, "runs-1-20"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" })
	refused(t, err, "Invalid", "spec.kubernetesVersion", "cilium v1.20.2 supports kubernetes 1.33 to 1.36, not 1.32.0",
		"the Cilium the cluster runs (status.cni.ciliumVersion)", "ichor upgrade kubernetes --list", "override")

	// Other writes of the cluster are not held by the pair.
	testenv.Must(t, update(t, operator, newCluster(ns, "runs-1-20"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }))

	// An admin overrides it: a warning and a Warning Event on the cluster.
	adminWarnings.take()
	testenv.Must(t, update(t, admin, newCluster(ns, "runs-1-20"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" }))
	if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "override by ada") || !strings.Contains(w, "cilium v1.20.2 supports") {
		t.Errorf("the override must be reported as a warning, got %q", w)
	}
	waitForOverrideEvent(t, ns, "runs-1-20", "cilium v1.20.2 supports")

	// The Cilium the cluster runs decides, not the one Ichor installs: v1.19 supports 1.32.
	old("d", "v1.19.3")
	testenv.Must(t, update(t, operator, newCluster(ns, "d"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" }))
}

// Rule: writes to Secret-naming fields need update on talosclusters/secret-references.
func TestSecretReferencesNeedTheirOwnVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	err := operator.Create(ctx, newCluster(ns, "c"))
	refused(t, err, "Forbidden", "spec.secretsBundleRef", "`update` on `talosclusters/secret-references`", `user "otto"`, "ichor-admin")

	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	// The operator may edit the cluster otherwise...
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }))
	// ...but not repoint the bundle.
	err = update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.SecretsBundleRef.Name = "attacker" })
	refused(t, err, "Forbidden", "spec.secretsBundleRef", "talosclusters/secret-references")
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.SecretsBundleRef.Name = "rotated" }))
}

// Rule 9: a TalosEtcdBackup the controller could never run (a schedule that
// is not cron, an endpoint with a path) is refused at admission with the way
// to write it; a runnable one is accepted, and one whose store lives inside
// the cluster is accepted with a warning (restores will refuse that store).
func TestEtcdBackupRefusedWhenItCannotRun(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	backup := func(name string, mut func(*ichorv1alpha1.TalosEtcdBackup)) *ichorv1alpha1.TalosEtcdBackup {
		b := &ichorv1alpha1.TalosEtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.TalosEtcdBackupSpec{
				ClusterName:      "c",
				Schedule:         "0 */6 * * *",
				S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
				EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
			},
		}
		mut(b)
		return b
	}
	refused(t, admin.Create(ctx, backup("cron", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.Schedule = "every six hours" })),
		"Invalid", "spec.schedule", "not a cron expression", "0 */6 * * *")
	refused(t, admin.Create(ctx, backup("tz", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.Schedule = "TZ=Europe/Paris 0 3 * * *" })),
		"Invalid", "spec.schedule", "the schedule is in UTC")
	refused(t, admin.Create(ctx, backup("path", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.S3.Endpoint = "https://s3.example.com/etcd" })),
		"Invalid", "spec.s3.endpoint", "spec.s3.prefix")

	adminWarnings.take()
	testenv.Must(t, admin.Create(ctx, backup("ok", func(*ichorv1alpha1.TalosEtcdBackup) {})))
	if w := adminWarnings.take(); len(w) != 0 {
		t.Errorf("a store outside the cluster was warned about: %v", w)
	}
	testenv.Must(t, admin.Create(ctx, backup("svc", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.S3.Endpoint = "http://minio.minio.svc:9000" })))
	if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "minio.minio.svc is the name of a Service") || !strings.Contains(w, "restore into the live cluster will be refused") {
		t.Errorf("no StoreInCluster warning for a Service store: %q", w)
	}
	// An update that breaks the schedule is refused too.
	err := update(t, admin, backup("ok", func(*ichorv1alpha1.TalosEtcdBackup) {}), func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.Schedule = "61 * * * *" })
	refused(t, err, "Invalid", "spec.schedule")
}

// Rule: Cilium values need update on talosclusters/cilium-values and may not set Ichor-owned keys.
func TestCiliumValues(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	values := func(raw string) func(*ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(raw)}}
		}
	}
	err := update(t, operator, newCluster(ns, "c"), values(`{"hubble":{"relay":{"enabled":true}}}`))
	refused(t, err, "Forbidden", "spec.cni.cilium.values", "`update` on `talosclusters/cilium-values`")

	err = update(t, admin, newCluster(ns, "c"), values(`{"kubeProxyReplacement":true,"tls":{"secretsNamespace":{"name":"x"}}}`))
	refused(t, err, "Invalid", "spec.cni.cilium.values", `"kubeProxyReplacement"`, `"tls.secretsNamespace.name"`, "remove these keys")

	testenv.Must(t, update(t, admin, newCluster(ns, "c"), values(`{"hubble":{"relay":{"enabled":true}}}`)))
}

// Rule: spec.authentication needs update on talosclusters/authentication,
// and what the kube-apiserver would refuse (or the contract cannot carry) is
// refused at admission.
func TestAuthenticationNeedsItsVerbAndAValidConfiguration(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	external := func(e ichorv1alpha1.ExternalOIDC) func(*ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) { c.Spec.Authentication.External = &e }
	}
	good := ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}}

	err := update(t, operator, newCluster(ns, "c"), external(good))
	refused(t, err, "Forbidden", "spec.authentication", "`update` on `talosclusters/authentication`")

	bad := good
	bad.CertificateAuthority = "not PEM"
	err = update(t, admin, newCluster(ns, "c"), external(bad))
	refused(t, err, "Invalid", "spec.authentication.external", "certificateAuthority")

	// The schema refuses a plain-http issuer before the webhook runs.
	plain := good
	plain.IssuerURL = "http://login.example.com"
	err = update(t, admin, newCluster(ns, "c"), external(plain))
	refused(t, err, "Invalid", "spec.authentication.external.issuerURL", "https URL")

	testenv.Must(t, update(t, admin, newCluster(ns, "c"), external(good)))

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "c"}, c))
	if c.Spec.Authentication.External == nil || c.Spec.Authentication.External.IssuerURL != good.IssuerURL {
		t.Fatalf("the admin's change was not written: %+v", c.Spec.Authentication)
	}
}

// Rule: the auto-patch ServiceAccount may only move the versions to a newer patch of the running minor.
func TestAutoPatchIsLimitedToNewerPatches(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.0"
		c.Spec.KubernetesVersion = "1.36.4"
		c.Spec.AutoPatch.Enabled = true
	})))
	bot := grantUser(t, guard.AutoPatchUsername("ichor-system"), rbacv1.PolicyRule{
		APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"talosclusters"}, Verbs: []string{"get", "update"},
	})
	testenv.Must(t, update(t, bot, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.1"
		c.Spec.KubernetesVersion = "1.36.5"
	}))
	err := update(t, bot, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.37.0" })
	refused(t, err, "Invalid", "spec.kubernetesVersion", "not a newer patch of the running minor")
	err = update(t, bot, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true })
	refused(t, err, "Invalid", "other than talosVersion and kubernetesVersion")
	// A person is not limited to patches.
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.37.0" }))
}

// Rule: an operator or admin pauses and resumes a cluster (update on
// talosclusters); a viewer cannot; a pause reason is at most
// guard.MaxPauseReason characters, and a refused write changes nothing.
func TestPauseIsAnUpdateWithAShortReason(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	pause := func(reason string) func(c *ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.Paused = true
			c.Annotations = map[string]string{ichorv1alpha1.PausedReasonAnnotation: reason}
		}
	}

	err := update(t, operator, newCluster(ns, "c"), pause(strings.Repeat("x", guard.MaxPauseReason+1)))
	refused(t, err, "Invalid", ichorv1alpha1.PausedReasonAnnotation, "at most 512", "fewer words")
	if err := update(t, viewer, newCluster(ns, "c"), pause("short")); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("a viewer paused the cluster: %v", err)
	}
	got := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "c"}, got))
	if got.Spec.Paused || got.Annotations[ichorv1alpha1.PausedReasonAnnotation] != "" {
		t.Fatalf("a refused pause changed the cluster: paused %t, annotations %v", got.Spec.Paused, got.Annotations)
	}

	testenv.Must(t, update(t, operator, newCluster(ns, "c"), pause("disk swap on cp-2")))
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.Paused = false
		delete(c.Annotations, ichorv1alpha1.PausedReasonAnnotation)
	}))
}

// Rule: asking the teardown to reset every machine
// (ichor.maesh.dev/teardown-reset-machines: "true") needs `reset-node` on
// talosoperations, the verb of a node reset: an operator is refused, an admin may set it, and anyone who may
// edit the cluster may take it away again.
func TestTeardownResetNeedsResetNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	set := func(v string) func(*ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			if v == "" {
				delete(c.Annotations, ichorv1alpha1.TeardownResetMachinesAnnotation)
				return
			}
			c.Annotations[ichorv1alpha1.TeardownResetMachinesAnnotation] = v
		}
	}
	err := update(t, operator, newCluster(ns, "c"), set("true"))
	refused(t, err, "Forbidden", ichorv1alpha1.TeardownResetMachinesAnnotation, "`reset-node` on `talosoperations`", `user "otto"`)
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), set("true")))
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), set("")))
}
