package talosemu

import (
	"bytes"
	"context"
	"errors"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	talosconfigconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
)

// Field names of the kube-apiserver's configuration files.
const (
	fieldAPIVersion = "apiVersion"
	fieldName       = "name"
	fieldKind       = "kind"
	// apiServerConfigV1 is the group version of the kube-apiserver's configuration files.
	apiServerConfigV1 = "apiserver.config.k8s.io/v1"
)

// serviceAccountPublicKeys is the kube-apiserver's --service-account-key-file:
// every public key the configuration accepts, the issuing key's first
// (t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go
// writes service-account.pub from KubernetesRoot's accepted keys, which
// t:internal/app/machined/pkg/controllers/secrets/root.go reads from
// K8sServiceAccountConfig().AcceptedKeys()). A token signed by any of them
// authenticates; only the issuing key signs.
func serviceAccountPublicKeys(sa talosconfigconfig.K8sServiceAccountConfig) ([]byte, error) {
	var out []byte

	for _, k := range sa.AcceptedKeys() {
		if k == nil || len(bytes.TrimSpace(k.Key)) == 0 {
			continue
		}

		out = append(append(out, bytes.TrimSpace(k.Key)...), '\n')
	}

	if len(out) == 0 {
		return nil, errors.New("the service account configuration accepts no public key")
	}

	return out, nil
}

// aggregatorAcceptedCAs is the kube-apiserver's
// --requestheader-client-ca-file: the aggregator CAs the configuration
// accepts, the issuing one first (KubeAggregatorCAConfig AcceptedCAs()).
func aggregatorAcceptedCAs(agg talosconfigconfig.K8sAggregatorCAConfig) []byte {
	var out []byte

	for _, c := range agg.AcceptedCAs() {
		if c != nil && len(bytes.TrimSpace(c.Crt)) > 0 {
			out = append(append(out, bytes.TrimSpace(c.Crt)...), '\n')
		}
	}

	return out
}

// encryptionConfig is the kube-apiserver's --encryption-provider-config, as
// Talos renders it
// (t:internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/apiserver.go
// APIServerEncryptionConfig): a KubeEtcdEncryptionConfig document's body as
// it is; without one, the legacy secrets, secretbox (key2) then aescbc (key1)
// then identity, for Secrets only. Nil when there is nothing to encrypt with.
func encryptionConfig(cfg talosconfig.Provider) map[string]any {
	doc := map[string]any{fieldAPIVersion: apiServerConfigV1, fieldKind: "EncryptionConfiguration"}

	if ec := cfg.K8sEtcdEncryptionConfig(); ec != nil {
		for k, v := range ec.EtcdEncryptionConfig() {
			doc[k] = v
		}

		return doc
	}

	cc := cfg.Cluster()
	if cc == nil {
		return nil
	}

	var providers []any

	if s := cc.SecretboxEncryptionSecret(); s != "" {
		providers = append(providers, map[string]any{"secretbox": map[string]any{"keys": []any{map[string]any{fieldName: "key2", "secret": s}}}})
	}

	if s := cc.AESCBCEncryptionSecret(); s != "" {
		providers = append(providers, map[string]any{"aescbc": map[string]any{"keys": []any{map[string]any{fieldName: "key1", "secret": s}}}})
	}

	if len(providers) == 0 {
		return nil
	}

	providers = append(providers, map[string]any{"identity": map[string]any{}})
	doc["resources"] = []any{map[string]any{"resources": []any{"secrets"}, "providers": providers}}

	return doc
}

// EtcdValue reads a key of the machine's etcd member as it is stored (for
// tests: a Secret is stored encrypted, its value prefixed with
// k8s:enc:secretbox:v1:<key name>:). Nil when the key is absent.
func (m *Machine) EtcdValue(ctx context.Context, key string) ([]byte, error) {
	c, _, err := m.localEtcdClient(ctx)
	if err != nil {
		return nil, err
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.Get(ctx, key)
	if err != nil {
		return nil, err
	}

	if len(resp.Kvs) == 0 {
		return nil, nil
	}

	return resp.Kvs[0].Value, nil
}
