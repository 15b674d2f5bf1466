package netpol

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The release sources the controller reads when its flags name none
// (controller/cmd/main.go, --release-source and --kubernetes-release-source).
const (
	DefaultImageFactory = "https://factory.talos.dev"
	DefaultK8sRegistry  = "https://ghcr.io"
)

// UIDeployment is ichor-ui's Deployment, whose --oidc-issuer-url names an
// external OIDC provider.
const UIDeployment = "ichor-ui"

// oidcIssuerFlag is ichor-ui's flag for an external OIDC provider
// (uiserver/cmd/ichor-ui/oidc.go).
const oidcIssuerFlag = "--oidc-issuer-url"

// LoadOptions are what the objects do not say.
type LoadOptions struct {
	// Namespace is Ichor's namespace (ichor-ui's Deployment).
	Namespace string
	// ReleaseSources are the controller's release sources (URLs); empty
	// entries stand for the defaults.
	ReleaseSources []string
	// ClusterNodes: the controller manages the cluster it runs in.
	ClusterNodes bool
}

// LoadTargets reads the egress targets from the objects that name them:
//
//   - every TalosMachine's spec.address, Talos API (50000), and a control
//     plane's also on the kube-apiserver's port (6443: the controller
//     reaches a cluster's Kubernetes API through its control planes);
//   - every TalosCluster's spec.endpoint (its port, 6443 when empty),
//     spec.discovery subnets and addresses (Talos API), and
//     spec.registry.imageFactoryURL;
//   - every TalosEtcdBackup's spec.s3.endpoint;
//   - the controller's release sources (o.ReleaseSources);
//   - ichor-ui's --oidc-issuer-url, from its Deployment in o.Namespace.
//
// A URL that does not parse is an error naming the object and field.
func LoadTargets(ctx context.Context, r client.Reader, o LoadOptions) (Targets, error) {
	t := Targets{ClusterNodes: o.ClusterNodes}

	var machines ichorv1alpha1.TalosMachineList
	if err := r.List(ctx, &machines); err != nil {
		return Targets{}, fmt.Errorf("listing TalosMachines: %w", err)
	}

	for _, m := range machines.Items {
		if m.Spec.Address == "" {
			continue
		}

		src := fmt.Sprintf("TalosMachine %s/%s spec.address", m.Namespace, m.Name)
		t.Controller = append(t.Controller, Target{Host: m.Spec.Address, Port: TalosAPIPort, Source: src})

		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			t.Controller = append(t.Controller, Target{Host: m.Spec.Address, Port: KubeAPIServerPort, Source: src + " (control plane)"})
		}
	}

	var clusters ichorv1alpha1.TalosClusterList
	if err := r.List(ctx, &clusters); err != nil {
		return Targets{}, fmt.Errorf("listing TalosClusters: %w", err)
	}

	for _, c := range clusters.Items {
		src := fmt.Sprintf("TalosCluster %s/%s", c.Namespace, c.Name)

		port := int(c.Spec.Endpoint.Port)
		if port == 0 {
			port = KubeAPIServerPort
		}

		if c.Spec.Endpoint.Host != "" {
			t.Controller = append(t.Controller, Target{Host: c.Spec.Endpoint.Host, Port: port, Source: src + " spec.endpoint"})
		}

		for _, s := range c.Spec.Discovery.Subnets {
			t.Controller = append(t.Controller, Target{Host: s, Port: TalosAPIPort, Source: src + " spec.discovery.subnets"})
		}

		for _, a := range c.Spec.Discovery.Addresses {
			t.Controller = append(t.Controller, Target{Host: a, Port: TalosAPIPort, Source: src + " spec.discovery.addresses"})
		}

		if u := c.Spec.Registry.ImageFactoryURL; u != "" {
			tg, err := urlTarget(u, src+" spec.registry.imageFactoryURL")
			if err != nil {
				return Targets{}, err
			}

			t.Controller = append(t.Controller, tg)
		}
	}

	var backups ichorv1alpha1.TalosEtcdBackupList
	if err := r.List(ctx, &backups); err != nil {
		return Targets{}, fmt.Errorf("listing TalosEtcdBackups: %w", err)
	}

	for _, b := range backups.Items {
		tg, err := urlTarget(b.Spec.S3.Endpoint, fmt.Sprintf("TalosEtcdBackup %s/%s spec.s3.endpoint", b.Namespace, b.Name))
		if err != nil {
			return Targets{}, err
		}

		t.Controller = append(t.Controller, tg)
	}

	for i, s := range o.ReleaseSources {
		if s == "" {
			s = []string{DefaultImageFactory, DefaultK8sRegistry}[min(i, 1)]
		}

		tg, err := urlTarget(s, "the controller's release source")
		if err != nil {
			return Targets{}, err
		}

		t.Controller = append(t.Controller, tg)
	}

	ui, err := uiTargets(ctx, r, o.Namespace)
	if err != nil {
		return Targets{}, err
	}

	t.UI = ui

	return t, nil
}

// uiTargets reads ichor-ui's external OIDC provider from its Deployment's
// arguments; no Deployment (ichor-ui runs elsewhere) is no target.
func uiTargets(ctx context.Context, r client.Reader, namespace string) ([]Target, error) {
	d := &appsv1.Deployment{}

	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: UIDeployment}, d)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}

	if err != nil {
		return nil, fmt.Errorf("reading Deployment %s/%s: %w", namespace, UIDeployment, err)
	}

	var out []Target

	for _, c := range d.Spec.Template.Spec.Containers {
		args := append(append([]string(nil), c.Command...), c.Args...)
		for i, a := range args {
			v, ok := strings.CutPrefix(a, oidcIssuerFlag+"=")
			if !ok && a == oidcIssuerFlag && i+1 < len(args) {
				v, ok = args[i+1], true
			}

			if !ok || v == "" {
				continue
			}

			tg, err := urlTarget(v, fmt.Sprintf("Deployment %s/%s container %s %s", namespace, UIDeployment, c.Name, oidcIssuerFlag))
			if err != nil {
				return nil, err
			}

			out = append(out, tg)
		}
	}

	return out, nil
}

// urlTarget is the host and port of an http(s) URL, the scheme's port when
// it names none.
func urlTarget(raw, source string) (Target, error) {
	shown := raw
	if strings.Contains(raw, "@") {
		shown = "(a URL with user information, not shown)"
	}

	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return Target{}, fmt.Errorf("%s: %q is not an http(s) URL with a host", source, shown)
	}

	port := 443
	if u.Scheme == "http" {
		port = 80
	}

	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return Target{}, fmt.Errorf("%s: %q has port %q, not a number", source, shown, p)
		}

		port = n
	}

	return Target{Host: u.Hostname(), Port: port, Source: source}, nil
}
