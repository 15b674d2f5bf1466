package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// helmRelease is the release name Ichor's chart is installed as.
const helmRelease = "ichor"

// helmConfig is the Helm SDK's configuration for Ichor's namespace of the
// cluster kubeconfig names (release records in Secrets, as helm's default).
func helmConfig(t *testing.T, kubeconfig string) *action.Configuration {
	t.Helper()

	ns := icNamespace
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns

	cfg := &action.Configuration{}
	testenv.Must(t, cfg.Init(flags, ns, "secret", func(string, ...any) {}))

	return cfg
}

// helmInstall installs charts/ichor of this tree as release ichor in
// Ichor's namespace; wait waits for its workloads as `helm install --wait` does.
func helmInstall(ctx context.Context, cfg *action.Configuration, values map[string]any, wait bool) (*release.Release, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}

	ch, err := loader.Load(filepath.Join(root, "charts", "ichor"))
	if err != nil {
		return nil, err
	}

	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = helmRelease, icNamespace, true
	in.Wait, in.Timeout = wait, 6*time.Minute

	return in.RunWithContext(ctx, ch, values)
}

// helmReleases lists the releases of every state in Ichor's namespace.
func helmReleases(t *testing.T, cfg *action.Configuration) []string {
	t.Helper()

	l := action.NewList(cfg)
	l.All = true

	rels, err := l.Run()
	testenv.Must(t, err)

	out := make([]string, 0, len(rels))
	for _, r := range rels {
		out = append(out, r.Name+"/"+r.Info.Status.String())
	}

	return out
}
