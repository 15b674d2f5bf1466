package guard

import (
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/settings"
)

// InstallationRequirements returns the permissions a create (old nil) or update
// of the IchorInstallation needs: the write rights over spec.version and
// spec.settings are split between two virtual subresources.
func InstallationRequirements(old, inst *ichorv1alpha1.IchorInstallation) []Requirement {
	var out []Requirement
	if old == nil || old.Spec.Version != inst.Spec.Version {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbUpdate, Resource: ResourceIchorInstallations, Subresource: SubresourceVersion, Name: inst.Name},
			Field:      "spec.version",
			Action:     "changing Ichor's version",
		})
	}
	if (old == nil && !reflect.DeepEqual(inst.Spec.Settings, ichorv1alpha1.IchorSettings{})) ||
		(old != nil && !reflect.DeepEqual(old.Spec.Settings, inst.Spec.Settings)) {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbUpdate, Resource: ResourceIchorInstallations, Subresource: SubresourceSettings, Name: inst.Name},
			Field:      "spec.settings",
			Action:     "changing Ichor's settings",
		})
	}
	return out
}

// ValidateSettings refuses lifetimes outside what ichor-ui can serve (the
// same bounds as UpdateSettings and `ichor settings set`), so that a
// setting written with kubectl is as checked as one written by the console.
func ValidateSettings(s ichorv1alpha1.IchorSettings) []Refusal {
	var out []Refusal
	check := func(field string, d *metav1.Duration, lo, hi time.Duration) {
		if d != nil && (d.Duration < lo || d.Duration > hi) {
			out = append(out, Refusal{
				Field:  field,
				Rule:   fmt.Sprintf("lasts %s to %s, not %s", lo, hi, d.Duration),
				WayOut: fmt.Sprintf("set a value from %s to %s, or remove the field for the default", lo, hi),
			})
		}
	}
	check("spec.settings.idTokenLifetime", s.IDTokenLifetime, settings.MinIDTokenLifetime, settings.MaxIDTokenLifetime)
	check("spec.settings.refreshTokenLifetime", s.RefreshTokenLifetime, settings.MinRefreshTokenLifetime, settings.MaxRefreshTokenLifetime)
	return out
}

// CheckBackupRunnable refuses a TalosEtcdBackup the controller could never
// run (engineering rule 9: what a release cannot do is refused at
// admission): a schedule that is not a cron expression in UTC, an S3
// endpoint that is not a bare http(s) URL. Everything else (the Secrets, the
// bucket, the cluster) may come later, and the controller reports it.
func CheckBackupRunnable(b *ichorv1alpha1.TalosEtcdBackup) []Refusal {
	var out []Refusal
	if _, err := etcdbackup.ParseSchedule(b.Spec.Schedule); err != nil {
		out = append(out, Refusal{
			Field:  "spec.schedule",
			Rule:   err.Error() + "; nothing was created",
			WayOut: `write five cron fields in UTC such as "0 */6 * * *" (every six hours), a descriptor such as @daily, or @every 6h`,
		})
	}
	if _, _, err := etcdbackup.ParseEndpoint(b.Spec.S3.Endpoint); err != nil {
		out = append(out, Refusal{
			Field:  "spec.s3.endpoint",
			Rule:   "the S3 endpoint " + err.Error() + "; nothing was created",
			WayOut: "set spec.s3.endpoint to the service's URL alone, such as https://s3.example.com:9000, and the key prefix in spec.s3.prefix",
		})
	}
	return out
}

// BackupStoreInCluster says why a backup's store lives inside the cluster it
// backs up ("" when it does not seem to): a Service name or an address in
// the cluster's pod or service range. Backups still run (with the
// StoreInCluster warning); a restore into the live cluster refuses such a
// store, since it writes its marker there after the API server is down.
func BackupStoreInCluster(b *ichorv1alpha1.TalosEtcdBackup, cluster *ichorv1alpha1.TalosCluster) string {
	n := etcdbackup.ClusterNetworks{}
	if cluster != nil {
		n = etcdbackup.ClusterNetworks{PodSubnets: cluster.Spec.Network.PodSubnets, ServiceSubnets: cluster.Spec.Network.ServiceSubnets, DNSDomain: cluster.Spec.Network.DNSDomain}
	}
	return etcdbackup.InCluster(b.Spec.S3.Endpoint, n)
}

// BackupRequirements returns the permissions a create (old nil) or update of a
// TalosEtcdBackup needs: the fields that name Secrets.
func BackupRequirements(old, b *ichorv1alpha1.TalosEtcdBackup) []Requirement {
	perm := Permission{Verb: VerbUpdate, Resource: ResourceTalosEtcdBackups, Subresource: SubresourceSecretReferences, Namespace: b.Namespace, Name: b.Name}
	var out []Requirement
	if old == nil || old.Spec.S3.CredentialsRef != b.Spec.S3.CredentialsRef {
		out = append(out, Requirement{Permission: perm, Field: "spec.s3.credentialsRef", Action: actionSecretRef})
	}
	if old == nil || old.Spec.EncryptionKeyRef != b.Spec.EncryptionKeyRef {
		out = append(out, Requirement{Permission: perm, Field: "spec.encryptionKeyRef", Action: actionSecretRef})
	}
	return out
}

// MaxReclaimTTL is the longest a foreign credential may live.
const MaxReclaimTTL = 60 * time.Minute

// ValidateReclaim checks a MachineReclaim.
func ValidateReclaim(r *ichorv1alpha1.MachineReclaim) []Refusal {
	if r.Spec.TTL != nil && (r.Spec.TTL.Duration <= 0 || r.Spec.TTL.Duration > MaxReclaimTTL) {
		return []Refusal{{
			Field:  "spec.ttl",
			Rule:   fmt.Sprintf("the foreign credential lives at most %s, not %s", MaxReclaimTTL, r.Spec.TTL.Duration),
			WayOut: "set spec.ttl between 1m and 60m, or leave it empty for 15m",
		}}
	}
	return nil
}

// CheckReclaimCredential refuses a reclaim whose credentialsRef does not name a
// Secret of type ichor.maesh.dev/foreign-talosconfig: the controller reads the
// Secret with its own rights, so the type keeps a reclaim from pointing it at
// any other Secret. secretType is nil when the Secret does not exist.
func CheckReclaimCredential(r *ichorv1alpha1.MachineReclaim, secretType *string) []Refusal {
	switch {
	case secretType == nil:
		return []Refusal{{
			Field:  "spec.credentialsRef",
			Rule:   fmt.Sprintf("Secret %q does not exist in namespace %q", r.Spec.CredentialsRef.Name, r.Namespace),
			WayOut: "create the Secret of type " + ichorv1alpha1.ForeignTalosconfigSecretType + " holding the talosconfig first",
		}}
	case *secretType != ichorv1alpha1.ForeignTalosconfigSecretType:
		return []Refusal{{
			Field:  "spec.credentialsRef",
			Rule:   fmt.Sprintf("Secret %q is of type %q; a reclaim reads only Secrets of type %s", r.Spec.CredentialsRef.Name, *secretType, ichorv1alpha1.ForeignTalosconfigSecretType),
			WayOut: "put the foreign talosconfig in a Secret of type " + ichorv1alpha1.ForeignTalosconfigSecretType,
		}}
	}
	return nil
}

// ReclaimRequirements returns the `reclaim` requirement on create (old nil) and
// on every write of the typed UUID.
func ReclaimRequirements(old, r *ichorv1alpha1.MachineReclaim) []Requirement {
	perm := Permission{Verb: VerbReclaim, Resource: ResourceMachineReclaims, Namespace: r.Namespace, Name: r.Name}
	if old == nil {
		return []Requirement{{Permission: perm, Field: fieldSpec, Action: "resetting a machine of another cluster"}}
	}
	if old.Spec.ConfirmUUID != r.Spec.ConfirmUUID {
		return []Requirement{{Permission: perm, Field: "spec.confirmUUID", Action: "confirming the reset of a machine of another cluster"}}
	}
	return nil
}

// CredentialSubresource maps a credential purpose to the talosclusters
// subresource that gates it; reader is gated by `get` on the cluster instead.
var CredentialSubresource = map[string]string{
	ichorv1alpha1.PurposeTalosconfigReader:   SubresourceTalosconfigReader,
	ichorv1alpha1.PurposeSupportBundle:       SubresourceSupportBundle,
	ichorv1alpha1.PurposeEtcdSnapshot:        SubresourceEtcdSnapshot,
	ichorv1alpha1.PurposePacketCapture:       SubresourcePacketCapture,
	ichorv1alpha1.PurposeRotationCredentials: SubresourceCredentials,
}

// CredentialRequestRequirements returns the permission the requester of a
// TalosCredentialRequest must hold.
func CredentialRequestRequirements(r *ichorv1alpha1.TalosCredentialRequest) []Requirement {
	if sub, ok := CredentialSubresource[r.Spec.Purpose]; ok {
		req := Requirement{
			Permission: Permission{Verb: VerbDownload, Resource: ResourceTalosClusters, Subresource: sub, Namespace: r.Namespace, Name: r.Spec.ClusterName},
			Field:      "spec.purpose",
			Action:     fmt.Sprintf("a %s credential", r.Spec.Purpose),
		}
		if sub == SubresourceCredentials {
			req.Grant = RotationCredentialsGrant(r.Namespace)
		}
		return []Requirement{req}
	}
	return []Requirement{{
		Permission: Permission{Verb: VerbGet, Resource: ResourceTalosClusters, Namespace: r.Namespace, Name: r.Spec.ClusterName},
		Field:      "spec.purpose",
		Action:     "a reader credential",
	}}
}

// RotationCredentialsRole is the ClusterRole that holds `download` on
// talosclusters/credentials, a CA rotation's new admin credentials; no
// built-in role holds it and nothing binds it by default.
const RotationCredentialsRole = "ichor-ca-rotation-credentials" //nolint:gosec // a role's name, not a credential

// RotationCredentialsGrant says how an administrator grants a person the
// rotation credentials in namespace.
func RotationCredentialsGrant(namespace string) string {
	return fmt.Sprintf("no role holds it by default: an administrator binds the %s ClusterRole to the person for the rotation "+
		"(`kubectl create rolebinding ca-rotation-credentials -n %s --clusterrole %s --user NAME`) and deletes the binding afterwards",
		RotationCredentialsRole, namespace, RotationCredentialsRole)
}

// MaxCredentialDuration is the longest certificate each purpose may ask for.
var MaxCredentialDuration = map[string]time.Duration{
	ichorv1alpha1.PurposeReader:              10 * time.Minute,
	ichorv1alpha1.PurposeSupportBundle:       10 * time.Minute,
	ichorv1alpha1.PurposeEtcdSnapshot:        10 * time.Minute,
	ichorv1alpha1.PurposePacketCapture:       10 * time.Minute,
	ichorv1alpha1.PurposeTalosconfigReader:   12 * time.Hour,
	ichorv1alpha1.PurposeRotationCredentials: 365 * 24 * time.Hour,
}

// ValidateCredentialRequest checks the requested duration against the purpose's maximum.
func ValidateCredentialRequest(r *ichorv1alpha1.TalosCredentialRequest) []Refusal {
	limit, ok := MaxCredentialDuration[r.Spec.Purpose]
	if !ok || r.Spec.Duration == nil || (r.Spec.Duration.Duration > 0 && r.Spec.Duration.Duration <= limit) {
		return nil
	}
	return []Refusal{{
		Field:  "spec.duration",
		Rule:   fmt.Sprintf("a %s credential lasts at most %s, not %s", r.Spec.Purpose, limit, r.Spec.Duration.Duration),
		WayOut: fmt.Sprintf("ask for %s or less, or leave spec.duration empty for the default", limit),
	}}
}
