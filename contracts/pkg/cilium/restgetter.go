package cilium

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NewRESTClientGetter is the genericclioptions.RESTClientGetter Helm's SDK
// needs, made from a *rest.Config (the pod's in-cluster configuration, or a
// kubeconfig already loaded) instead of a kubeconfig file; its namespace is
// kube-system, the release's. Discovery is cached in memory for the
// getter's life.
func NewRESTClientGetter(cfg *rest.Config) genericclioptions.RESTClientGetter {
	return &restGetter{cfg: rest.CopyConfig(cfg)}
}

type restGetter struct {
	cfg *rest.Config

	once      sync.Once
	discovery discovery.CachedDiscoveryInterface
	err       error
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.cfg), nil
}

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.once.Do(func() {
		dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.cfg))
		if err != nil {
			g.err = err
			return
		}
		g.discovery = memory.NewMemCacheClient(dc)
	})
	return g.discovery, g.err
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	m := restmapper.NewDeferredDiscoveryRESTMapper(dc)
	return restmapper.NewShortcutExpander(m, dc, nil), nil
}

func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return namespaceConfig{cfg: g.cfg}
}

// namespaceConfig is the clientcmd.ClientConfig of the getter: the
// configuration it was made from, in kube-system (Helm's kube client takes
// its default namespace from here).
type namespaceConfig struct{ cfg *rest.Config }

func (c namespaceConfig) RawConfig() (clientcmdapi.Config, error) {
	return *clientcmdapi.NewConfig(), nil
}

func (c namespaceConfig) ClientConfig() (*rest.Config, error) {
	return rest.CopyConfig(c.cfg), nil
}

func (c namespaceConfig) Namespace() (string, bool, error) {
	return Namespace, false, nil
}

func (c namespaceConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}
