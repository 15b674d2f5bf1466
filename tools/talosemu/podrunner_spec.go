package talosemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// What a container's process gets, and how the paths of a container map to the machine.
//
// A process cannot see a container's file system, so every volume lives in a directory of the
// pod (<machine>/pods/<namespace>_<name>_<uid>/volumes/<volume>, hostPath volumes under
// <machine>/hostpath/) and the absolute paths a container names are rewritten: an argument,
// the value of a --flag=value argument, an environment value or the working directory equal
// to a volumeMount's mountPath or below it is replaced by the volume's directory (subPath
// included), before $(VAR) references are expanded. Paths a binary uses without naming them
// in its arguments or environment are not mapped.
//
// Every pod shares the machine's network, so a wildcard listen address in an argument or an
// environment value (":8080", "0.0.0.0:8080", "[::]:8080") is rewritten to the pod's loopback
// address, which is what the downward API's status.podIP gives too.
//
// In-cluster configuration: client-go's rest.InClusterConfig reads the fixed path
// /var/run/secrets/kubernetes.io/serviceaccount, which a process cannot have, so a container
// that mounts the ServiceAccount token there gets KUBECONFIG naming a kubeconfig with the
// same server (the API server, as KUBERNETES_SERVICE_HOST/PORT say), CA (ca.crt of the
// mount) and token file (the mount's token, which client-go re-reads as it is renewed) —
// what controller-runtime's config.GetConfig and clientcmd's default loading rules honour.

// saMountPath is where the ServiceAccount admission plugin mounts the token volume.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// launch is how a container's process starts.
type launch struct {
	argv []string
	env  []string
	dir  string
}

// runError is a container whose command cannot run (the kubelet's RunContainerError).
type runError struct{ msg string }

func (e runError) Error() string { return e.msg }

// mountMap maps a container path to a directory or file of the machine.
type mountMap struct{ ctr, host string }

// launchSpec computes the process of a container: argv, environment and working directory.
//
//nolint:gocyclo,cyclop
func (p *runPod) launchSpec(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, bin string) (*launch, error) {
	mounts, err := p.mountsOf(pod, ctr)
	if err != nil {
		return nil, err
	}

	p.mu.Lock()
	loopback := p.loopback
	p.mu.Unlock()

	vars, order, err := p.containerEnv(ctx, pod, ctr, mounts, loopback)
	if err != nil {
		return nil, err
	}

	// the image's entrypoint is its binary; a command must name it
	var argv []string

	switch {
	case len(ctr.Command) == 0:
		argv = append([]string{bin}, ctr.Args...)
	case filepath.Base(ctr.Command[0]) == filepath.Base(bin):
		argv = append(append([]string{bin}, ctr.Command[1:]...), ctr.Args...)
	default:
		return nil, runError{fmt.Sprintf("talosemu runs only the image's own binary %s; command %q names something else", filepath.Base(bin), ctr.Command[0])}
	}

	for i := 1; i < len(argv); i++ {
		argv[i] = bindLoopback(expand(rewriteArg(argv[i], mounts), vars), loopback)
	}

	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOSTNAME=" + pod.Name,
		"HOME=" + filepath.Join(p.dir, "home"),
		"TMPDIR=" + filepath.Join(p.dir, "tmp"),
	}

	if lim := ctr.Resources.Limits.Cpu(); lim != nil && !lim.IsZero() {
		// Go sizes GOMAXPROCS to the container's CPU limit (Go 1.25); a process has none
		env = append(env, "GOMAXPROCS="+strconv.Itoa(max(1, int(math.Ceil(float64(lim.MilliValue())/1000)))))
	}

	for _, m := range ctr.VolumeMounts {
		if m.MountPath == saMountPath {
			kc, err := p.writeInClusterKubeconfig(pod, rewritePath(saMountPath, mounts))
			if err != nil {
				return nil, err
			}

			env = append(env, "KUBECONFIG="+kc)
		}
	}

	env = append(env, p.r.m.world.podEnv...)

	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}

	dir := filepath.Join(p.dir, "work")
	if ctr.WorkingDir != "" {
		if d := rewritePath(ctr.WorkingDir, mounts); d != ctr.WorkingDir {
			dir = d
		}
	}

	return &launch{argv: argv, env: env, dir: dir}, nil
}

// mountsOf maps the container's volumeMounts, longest path first.
func (p *runPod) mountsOf(pod *corev1.Pod, ctr *corev1.Container) ([]mountMap, error) {
	var out []mountMap

	for _, vm := range ctr.VolumeMounts {
		var vol *corev1.Volume

		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}

		if vol == nil {
			return nil, fmt.Errorf("volumeMount %q names no volume of the pod", vm.Name)
		}

		host := p.volDir(vol)
		if vm.SubPath != "" {
			host = filepath.Join(host, vm.SubPath)
		}

		out = append(out, mountMap{ctr: filepath.Clean(vm.MountPath), host: host})
	}

	sort.SliceStable(out, func(i, j int) bool { return len(out[i].ctr) > len(out[j].ctr) })

	return out, nil
}

// volDir is where a volume lives on the machine.
func (p *runPod) volDir(vol *corev1.Volume) string {
	if vol.HostPath != nil {
		return filepath.Join(p.r.m.dir, "hostpath", filepath.Clean("/"+vol.HostPath.Path))
	}

	return filepath.Join(p.dir, "volumes", vol.Name)
}

// rewritePath maps a container path inside a mount to the machine.
func rewritePath(v string, mounts []mountMap) string {
	for _, m := range mounts {
		if v == m.ctr || (m.ctr != "/" && strings.HasPrefix(v, m.ctr+"/")) {
			return m.host + v[len(m.ctr):]
		}
	}

	return v
}

// rewriteArg maps an argument that is a path, or a --flag=path.
func rewriteArg(a string, mounts []mountMap) string {
	if r := rewritePath(a, mounts); r != a {
		return r
	}

	if strings.HasPrefix(a, "-") {
		if k, v, ok := strings.Cut(a, "="); ok {
			if r := rewritePath(v, mounts); r != v {
				return k + "=" + r
			}
		}
	}

	return a
}

// wildcardListen is a listen address on every interface: ":8080", "0.0.0.0:8080", "[::]:8080".
var wildcardListen = regexp.MustCompile(`^(0\.0\.0\.0|\[::\])?:([0-9]{1,5})$`)

// bindLoopback rewrites a wildcard listen address (alone or as a --flag=value) to the pod's
// loopback address.
func bindLoopback(a, loopback string) string {
	if loopback == "" {
		return a
	}

	if m := wildcardListen.FindStringSubmatch(a); m != nil {
		return net.JoinHostPort(loopback, m[2])
	}

	if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
		if m := wildcardListen.FindStringSubmatch(v); m != nil {
			return k + "=" + net.JoinHostPort(loopback, m[2])
		}
	}

	return a
}

// expand replaces $(VAR) with the value of VAR when it is defined, $$ with $, and leaves
// anything else as it is, as the kubelet expands command, args and env
// (k:third_party/forked/golang/expansion/expand.go).
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}

	var b strings.Builder

	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])

			continue
		}

		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])

				return b.String()
			}

			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}

			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}

	return b.String()
}

// apiServerAddr is host and port of the API server the pods talk to: the cluster endpoint.
func (p *runPod) apiServerAddr() (host, port string, err error) {
	u, err := url.Parse(kubeEndpoint(p.r.m.activeConfig()))
	if err != nil || u.Host == "" {
		return "", "", errors.New("the machine configuration names no cluster endpoint")
	}

	host, port = u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}

	return host, port, nil
}

// containerEnv resolves the container's environment in the kubelet's order: the kubernetes
// Service's variables (pointing at the API server), envFrom, then env, each value expanded
// against what came before; paths and wildcard addresses rewritten. It returns the values and
// the order of the names.
//
//nolint:gocyclo,cyclop
func (p *runPod) containerEnv(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, mounts []mountMap, loopback string) (map[string]string, []string, error) {
	vars := map[string]string{}
	order := []string{}

	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}

		vars[k] = v
	}

	host, port, err := p.apiServerAddr()
	if err != nil {
		return nil, nil, err
	}

	hp := net.JoinHostPort(host, port)
	set("KUBERNETES_SERVICE_HOST", host)
	set("KUBERNETES_SERVICE_PORT", port)
	set("KUBERNETES_SERVICE_PORT_HTTPS", port)
	set("KUBERNETES_PORT", "tcp://"+hp)

	cms, secrets := map[string]*corev1.ConfigMap{}, map[string]*corev1.Secret{}

	for _, ef := range ctr.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, err := p.configMap(ctx, cms, ef.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(ef.ConfigMapRef.Optional) {
					continue
				}

				return nil, nil, fmt.Errorf("configmap %q: %w", ef.ConfigMapRef.Name, err)
			}

			for _, k := range sortedKeys(cm.Data) {
				set(ef.Prefix+k, cm.Data[k])
			}
		case ef.SecretRef != nil:
			s, err := p.secret(ctx, secrets, ef.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(ef.SecretRef.Optional) {
					continue
				}

				return nil, nil, fmt.Errorf("secret %q: %w", ef.SecretRef.Name, err)
			}

			for _, k := range sortedKeys(s.Data) {
				set(ef.Prefix+k, string(s.Data[k]))
			}
		}
	}

	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))

			continue
		}

		v, ok, err := p.envValueFrom(ctx, pod, ctr, e.ValueFrom, cms, secrets, loopback)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}

		if ok {
			set(e.Name, v)
		}
	}

	for k, v := range vars {
		vars[k] = bindLoopback(rewritePath(v, mounts), loopback)
	}

	return vars, order, nil
}

func optional(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return keys
}

// envValueFrom resolves a valueFrom (false: an optional reference that is missing).
func (p *runPod) envValueFrom(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, src *corev1.EnvVarSource,
	cms map[string]*corev1.ConfigMap, secrets map[string]*corev1.Secret, loopback string,
) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := p.fieldValue(pod, src.FieldRef.FieldPath, loopback)

		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := resourceValue(pod, ctr, src.ResourceFieldRef)

		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef

		cm, err := p.configMap(ctx, cms, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}

			return "", false, fmt.Errorf("configmap %q: %w", ref.Name, err)
		}

		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}

		if optional(ref.Optional) {
			return "", false, nil
		}

		return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef

		s, err := p.secret(ctx, secrets, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}

			return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
		}

		if v, ok := s.Data[ref.Key]; ok {
			return string(v), true, nil
		}

		if optional(ref.Optional) {
			return "", false, nil
		}

		return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
	}

	return "", false, errors.New("talosemu supports fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef")
}

// fieldValue is a downward API field of the pod; status.podIP is the pod's loopback address
// (what its processes listen on).
func (p *runPod) fieldValue(pod *corev1.Pod, path, loopback string) (string, error) {
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}

	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}

	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return p.r.m.IP(), nil
	case "status.podIP", "status.podIPs":
		return loopback, nil
	}

	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// formatMap renders labels or annotations as the downward API does: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	var b strings.Builder

	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(m[k]))
	}

	return strings.TrimSuffix(b.String(), "\n")
}

// nodeAllocatable is what an emulated Node offers (kubelet.go): a container without a limit
// sees these.
var nodeAllocatable = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("4"),
	corev1.ResourceMemory:           resource.MustParse("8Gi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
}

// resourceValue is a resourceFieldRef: the container's request or limit (a limit defaults to
// the Node's allocatable) divided by the divisor, rounded up.
func resourceValue(pod *corev1.Pod, ctr *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	c := ctr

	if ref.ContainerName != "" {
		c = nil

		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				c = &pod.Spec.Containers[i]
			}
		}

		if c == nil {
			return "", fmt.Errorf("no container %q", ref.ContainerName)
		}
	}

	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}

	rn := corev1.ResourceName(name)

	var q resource.Quantity

	switch kind {
	case "limits":
		if v, ok := c.Resources.Limits[rn]; ok {
			q = v
		} else {
			q = nodeAllocatable[rn]
		}
	case "requests":
		q = c.Resources.Requests[rn]
	default:
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}

	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}

	if rn == corev1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(div.MilliValue()))), 10), nil
	}

	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(div.Value()))), 10), nil
}

func (p *runPod) configMap(ctx context.Context, cache map[string]*corev1.ConfigMap, name string) (*corev1.ConfigMap, error) {
	if cm, ok := cache[name]; ok {
		return cm, nil
	}

	cm, err := p.r.c.CoreV1().ConfigMaps(p.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}

	cache[name] = cm

	return cm, nil
}

func (p *runPod) secret(ctx context.Context, cache map[string]*corev1.Secret, name string) (*corev1.Secret, error) {
	if s, ok := cache[name]; ok {
		return s, nil
	}

	s, err := p.r.c.CoreV1().Secrets(p.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}

	cache[name] = s

	return s, nil
}

// volFile is one file of a volume's payload.
type volFile struct {
	data []byte
	mode os.FileMode
}

// writeVolumes writes every volume of the pod (the kubelet's volume manager): emptyDir and
// hostPath directories, and the ConfigMap, Secret, downward API and projected volumes
// (ServiceAccount tokens from the TokenRequest API) with the kubelet's atomic writer layout.
//
//nolint:gocyclo,cyclop
func (p *runPod) writeVolumes(ctx context.Context, pod *corev1.Pod) error {
	cms, secrets := map[string]*corev1.ConfigMap{}, map[string]*corev1.Secret{}

	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		dir := p.volDir(vol)

		var (
			payload map[string]volFile
			err     error
		)

		switch {
		case vol.EmptyDir != nil:
			err = os.MkdirAll(dir, 0o777) //nolint:gosec // an emptyDir is writable by the container
		case vol.HostPath != nil:
			err = hostPathVolume(dir, vol.HostPath)
		case vol.ConfigMap != nil:
			payload, err = p.configMapPayload(ctx, cms, vol.ConfigMap.Name, vol.ConfigMap.Items, vol.ConfigMap.Optional, vol.ConfigMap.DefaultMode)
		case vol.Secret != nil:
			payload, err = p.secretPayload(ctx, secrets, vol.Secret.SecretName, vol.Secret.Items, vol.Secret.Optional, vol.Secret.DefaultMode)
		case vol.DownwardAPI != nil:
			payload, err = p.downwardPayload(pod, vol.DownwardAPI.Items, vol.DownwardAPI.DefaultMode)
		case vol.Projected != nil:
			payload, err = p.projectedPayload(ctx, pod, vol, cms, secrets)
		default:
			err = fmt.Errorf("volume %q: talosemu writes emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes only", vol.Name)
		}

		if err != nil {
			return fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", vol.Name, err)
		}

		if payload != nil {
			if err := writeAtomicDir(dir, payload); err != nil {
				return fmt.Errorf("volume %q: %w", vol.Name, err)
			}
		}
	}

	return nil
}

func hostPathVolume(dir string, hp *corev1.HostPathVolumeSource) error {
	typ := corev1.HostPathUnset
	if hp.Type != nil {
		typ = *hp.Type
	}

	switch typ {
	case corev1.HostPathFile, corev1.HostPathFileOrCreate, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
		if err := os.MkdirAll(filepath.Dir(dir), stateDirFileMode); err != nil {
			return err
		}

		if typ == corev1.HostPathFileOrCreate || typ == corev1.HostPathFile {
			f, err := os.OpenFile(dir, os.O_CREATE|os.O_WRONLY, secretFileMode)
			if err != nil {
				return err
			}

			return f.Close()
		}

		return nil
	default:
		return os.MkdirAll(dir, stateDirFileMode)
	}
}

func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item) //nolint:gosec // a file mode of the pod spec (0–0777)
	case def != nil:
		return os.FileMode(*def) //nolint:gosec // a file mode of the pod spec (0–0777)
	default:
		return 0o644
	}
}

// keysPayload projects data keys to files: all keys, or the items given.
func keysPayload(kind, name string, data map[string][]byte, items []corev1.KeyToPath, opt *bool, def *int32) (map[string]volFile, error) {
	out := map[string]volFile{}

	if len(items) == 0 {
		for k, v := range data {
			out[k] = volFile{data: v, mode: fileMode(nil, def)}
		}

		return out, nil
	}

	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional(opt) {
				continue
			}

			return nil, fmt.Errorf("configuration of %s %q has no key %q", kind, name, it.Key)
		}

		out[it.Path] = volFile{data: v, mode: fileMode(it.Mode, def)}
	}

	return out, nil
}

func (p *runPod) configMapPayload(ctx context.Context, cms map[string]*corev1.ConfigMap, name string, items []corev1.KeyToPath, opt *bool, def *int32) (map[string]volFile, error) {
	cm, err := p.configMap(ctx, cms, name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional(opt) {
			return map[string]volFile{}, nil
		}

		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}

	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}

	for k, v := range cm.BinaryData {
		data[k] = v
	}

	return keysPayload("configmap", name, data, items, opt, def)
}

func (p *runPod) secretPayload(ctx context.Context, secrets map[string]*corev1.Secret, name string, items []corev1.KeyToPath, opt *bool, def *int32) (map[string]volFile, error) {
	s, err := p.secret(ctx, secrets, name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional(opt) {
			return map[string]volFile{}, nil
		}

		return nil, fmt.Errorf("secret %q: %w", name, err)
	}

	return keysPayload("secret", name, s.Data, items, opt, def)
}

func (p *runPod) downwardPayload(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def *int32) (map[string]volFile, error) {
	p.mu.Lock()
	loopback := p.loopback
	p.mu.Unlock()

	out := map[string]volFile{}

	for _, it := range items {
		var (
			v   string
			err error
		)

		switch {
		case it.FieldRef != nil:
			v, err = p.fieldValue(pod, it.FieldRef.FieldPath, loopback)
		case it.ResourceFieldRef != nil:
			v, err = resourceValue(pod, &corev1.Container{}, it.ResourceFieldRef)
		}

		if err != nil {
			return nil, err
		}

		out[it.Path] = volFile{data: []byte(v), mode: fileMode(it.Mode, def)}
	}

	return out, nil
}

func (p *runPod) projectedPayload(ctx context.Context, pod *corev1.Pod, vol *corev1.Volume, cms map[string]*corev1.ConfigMap, secrets map[string]*corev1.Secret) (map[string]volFile, error) {
	out := map[string]volFile{}
	def := vol.Projected.DefaultMode

	for _, src := range vol.Projected.Sources {
		var (
			part map[string]volFile
			err  error
		)

		switch {
		case src.ConfigMap != nil:
			part, err = p.configMapPayload(ctx, cms, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, def)
		case src.Secret != nil:
			part, err = p.secretPayload(ctx, secrets, src.Secret.Name, src.Secret.Items, src.Secret.Optional, def)
		case src.DownwardAPI != nil:
			part, err = p.downwardPayload(pod, src.DownwardAPI.Items, def)
		case src.ServiceAccountToken != nil:
			var tok string

			tok, err = p.token(ctx, pod, vol.Name, src.ServiceAccountToken)
			part = map[string]volFile{src.ServiceAccountToken.Path: {data: []byte(tok), mode: fileMode(nil, def)}}
		default:
			err = errors.New("talosemu projects configMap, secret, downwardAPI and serviceAccountToken sources only")
		}

		if err != nil {
			return nil, err
		}

		for k, v := range part {
			out[k] = v
		}
	}

	return out, nil
}

// saToken is a projected ServiceAccount token and when it was issued and expires.
type saToken struct {
	token           string
	issued, expires time.Time
}

// due is true once 80 % of the token's lifetime passed (or 24 h), when the kubelet renews it
// (k:pkg/kubelet/token/token_manager.go requiresRefresh).
func (t *saToken) due(now time.Time) bool {
	ttl := t.expires.Sub(t.issued)

	return now.After(t.issued.Add(min(ttl*8/10, 24*time.Hour)))
}

func (p *runPod) tokenDue() bool {
	p.mu.Lock()
	defer p.mu.Unlock()

	now := time.Now()

	for _, t := range p.tokens {
		if t.due(now) {
			return true
		}
	}

	return false
}

// token returns the projected token, requesting a new one from the TokenRequest API (with
// the kubelet's identity, bound to the pod) when there is none or it is due.
func (p *runPod) token(ctx context.Context, pod *corev1.Pod, vol string, src *corev1.ServiceAccountTokenProjection) (string, error) {
	key := vol + "/" + src.Path

	p.mu.Lock()
	t := p.tokens[key]
	p.mu.Unlock()

	if t != nil && !t.due(time.Now()) {
		return t.token, nil
	}

	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}

	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: kindPod, APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}

	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}

	got, err := p.r.c.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}

	t = &saToken{token: got.Status.Token, issued: time.Now(), expires: got.Status.ExpirationTimestamp.Time}

	p.mu.Lock()
	p.tokens[key] = t
	p.mu.Unlock()

	return t.token, nil
}

// writeInClusterKubeconfig writes the kubeconfig a container with the ServiceAccount mount
// gets in KUBECONFIG: the API server, the mount's ca.crt and token file, the pod's namespace.
func (p *runPod) writeInClusterKubeconfig(pod *corev1.Pod, saDir string) (string, error) {
	host, port, err := p.apiServerAddr()
	if err != nil {
		return "", err
	}

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["in-cluster"] = &clientcmdapi.Cluster{
		Server:               "https://" + net.JoinHostPort(host, port),
		CertificateAuthority: filepath.Join(saDir, "ca.crt"),
	}
	cfg.AuthInfos["serviceaccount"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(saDir, "token")}
	cfg.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "in-cluster", AuthInfo: "serviceaccount", Namespace: pod.Namespace}
	cfg.CurrentContext = "in-cluster"

	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return "", err
	}

	path := filepath.Join(p.dir, "kubeconfig")

	return path, writeFileAtomic(path, b, secretFileMode)
}

// writeAtomicDir writes a volume's files as the kubelet's atomic writer does
// (k:pkg/volume/util/atomic_writer.go): the files in a new timestamped directory, the
// ..data symlink swapped to it in one rename, each top-level name a symlink into ..data; a
// reader sees the old or the new set, never a mix. Nothing is written when the payload did
// not change.
func writeAtomicDir(dir string, payload map[string]volFile) error {
	if err := os.MkdirAll(dir, stateDirFileMode); err != nil {
		return err
	}

	data := filepath.Join(dir, "..data")

	if unchanged(data, payload) {
		return nil
	}

	ts := filepath.Join(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.000000000"))
	if err := os.MkdirAll(ts, stateDirFileMode); err != nil {
		return err
	}

	for name, f := range payload {
		p := filepath.Join(ts, filepath.Clean("/" + name)[1:])
		if err := os.MkdirAll(filepath.Dir(p), stateDirFileMode); err != nil {
			return err
		}

		if err := os.WriteFile(p, f.data, f.mode.Perm()); err != nil {
			return err
		}
	}

	old, _ := os.Readlink(data)

	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)

	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}

	if err := os.Rename(tmp, data); err != nil {
		return err
	}

	tops := map[string]bool{}
	for name := range payload {
		tops[strings.SplitN(filepath.Clean("/" + name)[1:], "/", 2)[0]] = true
	}

	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}

		if !tops[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}

	for top := range tops {
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}

		if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
			return err
		}
	}

	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}

	return nil
}

// unchanged is true when the ..data directory holds exactly the payload.
func unchanged(data string, payload map[string]volFile) bool {
	var files []string

	err := filepath.WalkDir(data+"/", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}

		return err
	})
	if err != nil || len(files) != len(payload) {
		return false
	}

	for _, path := range files {
		rel, err := filepath.Rel(data, path)
		if err != nil {
			return false
		}

		f, ok := payload[rel]
		if !ok {
			return false
		}

		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, f.data) {
			return false
		}
	}

	return true
}
