package bundle

import (
	"bytes"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// AcceptedKey is the bundle Secret's data key that lists the CA certificates
// the cluster's nodes accept beside the bundle's own while a CA rotation runs
// (architecture, "Backup, recovery, certificates"): the new CAs while they
// are only accepted, the old ones once the new issue. It holds certificates
// only, never a key. Absent (the usual case) means the bundle's CAs alone.
const AcceptedKey = "accepted-cas.yaml"

// Accepted are the extra accepted CA certificates, PEM encoded.
type Accepted struct {
	// Talos are accepted by apid (machine.acceptedCAs).
	Talos []string `json:"talos,omitempty"`
	// Kubernetes are accepted by the kube-apiserver and the kubelets
	// (KubeAPIServerCAConfig acceptedCAs, cluster.acceptedCAs before v1.14).
	Kubernetes []string `json:"kubernetes,omitempty"`
	// Aggregator are accepted by the kube-apiserver's front proxy
	// authentication (KubeAggregatorCAConfig acceptedCAs, the
	// requestheader client CA).
	Aggregator []string `json:"aggregator,omitempty"`
}

// Empty is true when nothing is accepted beside the bundle's CAs.
func (a Accepted) Empty() bool {
	return len(a.Talos) == 0 && len(a.Kubernetes) == 0 && len(a.Aggregator) == 0
}

// TalosPEM is the PEM of every Talos API CA a client of this cluster trusts:
// the bundle's and the accepted ones.
func (a Accepted) TalosPEM(issuing []byte) []byte {
	return joinPEM(issuing, a.Talos)
}

// KubernetesPEM is the PEM of every Kubernetes CA a client of this cluster
// trusts: the bundle's and the accepted ones.
func (a Accepted) KubernetesPEM(issuing []byte) []byte {
	return joinPEM(issuing, a.Kubernetes)
}

func joinPEM(first []byte, rest []string) []byte {
	out := append(bytes.TrimSpace(bytes.Clone(first)), '\n')

	for _, c := range rest {
		if b := bytes.TrimSpace([]byte(c)); !bytes.Contains(out, b) {
			out = append(append(out, b...), '\n')
		}
	}

	return out
}

// EncodeAccepted is the data of AcceptedKey.
func EncodeAccepted(a Accepted) ([]byte, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}

	return yaml.Marshal(a)
}

// LoadAccepted reads the extra accepted CAs from the bundle Secret; a Secret
// without AcceptedKey accepts nothing more. Errors name the Secret and the
// key, never a value.
func LoadAccepted(secret *corev1.Secret) (Accepted, error) {
	var a Accepted

	if secret == nil {
		return a, nil
	}

	data, ok := secret.Data[AcceptedKey]
	if !ok || len(data) == 0 {
		return a, nil
	}

	if err := yaml.UnmarshalStrict(data, &a); err != nil {
		return Accepted{}, fmt.Errorf("secrets bundle Secret %s/%s key %q does not decode as the accepted CAs", secret.Namespace, secret.Name, AcceptedKey)
	}

	if err := a.validate(); err != nil {
		return Accepted{}, fmt.Errorf("secrets bundle Secret %s/%s key %q: %w", secret.Namespace, secret.Name, AcceptedKey, err)
	}

	return a, nil
}

// validate: every entry is one PEM certificate, and nothing else (a key in
// this list would be written into every machine's configuration as a CA).
func (a Accepted) validate() error {
	for _, list := range []struct {
		name  string
		certs []string
	}{{"talos", a.Talos}, {"kubernetes", a.Kubernetes}, {"aggregator", a.Aggregator}} {
		for i, c := range list.certs {
			block, rest := pem.Decode([]byte(c))
			if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) > 0 {
				return fmt.Errorf("%s[%d] is not one PEM certificate", list.name, i)
			}
		}
	}

	return nil
}
