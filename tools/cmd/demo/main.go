// Command ichor-demo starts Ichor's demo world on this machine (run it through
// `go tool task demo`): five emulated Talos machines (tools/talosemu; three
// control planes and two workers, in maintenance mode) whose first control
// plane runs a real Kubernetes control plane once bootstrapped; `ichor init
// --preset standard --install manifest` against the first, whose installer
// Job installs Ichor in the cluster (the emulator's pod runner runs the pods
// of Ichor's images as processes of the binaries in bin/: ichor-controller
// with its admission webhooks on, and ichor-ui, the issuer of Ichor's own
// users at the --ui-url init records); `ichor ui` forwarding that address to
// the ichor-ui pod for the web console; and the other machines added to
// discovery, so they wait as pending machines for `ichor machine approve`.
//
// A second run reuses the state directory (the machines keep their
// configuration, etcd and secrets, and init continues from what exists);
// --fresh starts clean. Ctrl-C stops everything it started.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const (
	clusterName    = "demo"
	flagKubeconfig = "--kubeconfig"
)

func main() {
	stateDir := flag.String("state-dir", ".demo", "Directory for the demo's machines, secrets store, kubeconfig and logs.")
	subnet := flag.String("subnet", "127.0.10.0/24", "Loopback subnet of the emulated Talos machines.")
	binDir := flag.String("bin-dir", "", "Directory with the ichor, ichor-controller, ichor-installer and ichor-ui binaries (default: this program's directory).")
	podSubnet := flag.String("pod-subnet", "127.10.0.0/24", "Loopback range the processes of the cluster's Ichor pods listen on.")
	fresh := flag.Bool("fresh", false, "Delete the state directory first and start a new cluster.")
	uiListen := flag.String("ui-listen", "127.0.0.1:8443", "Local address of the web console (HTTPS), which `ichor ui` forwards to the ichor-ui pod.")
	flag.Parse()

	if err := run(*stateDir, *subnet, *podSubnet, *binDir, *uiListen, *fresh); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	state, bin string
	env        []string
	kubeconfig string
	passFile   string
	uiURL      string
	s3Endpoint string
	ageKey     string
}

func run(stateDir, subnet, podSubnet, binDir, uiListen string, fresh bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	d, err := prepare(stateDir, binDir, fresh)
	if err != nil {
		return err
	}

	started := time.Now()
	d.uiURL = "https://" + uiListen

	fmt.Printf("ichor-demo %s: starting 5 emulated Talos machines (3 control planes, 2 workers) with Kubernetes...\n", version.Get().Version)

	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec, err := talosemu.GenerateSpec(5, 3, subnet)
	if err != nil {
		return err
	}

	world, err := talosemu.Start(ctx, spec, filepath.Join(d.state, "machines"), talosemu.Options{
		Kubernetes: true, SingleAPIServer: true, KubeAssets: assets, PodBinDir: d.bin, PodSubnet: podSubnet,
	})
	if err != nil {
		return fmt.Errorf("starting the emulated Talos machines: %w", err)
	}

	defer func() {
		fmt.Println("ichor-demo: stopping the emulated Talos machines")
		world.Close()
	}()

	machines := world.Machines()
	first := machines[0].IP()

	// init bootstraps etcd, runs the installer Job and waits until the
	// in-cluster controller has taken the first control plane over.
	initStart := time.Now()

	if err := d.ichor(ctx, os.Stdout, d.initArgs(first)...); err != nil {
		return err
	}

	fmt.Printf("ichor-demo: Ichor runs in the cluster (ichor-controller with its webhooks, ichor-ui) %s after init started\n",
		time.Since(initStart).Round(time.Second))

	others := make([]string, 0, len(machines)-1)
	for _, m := range machines[1:] {
		others = append(others, m.IP())
	}

	if err := d.ichor(ctx, os.Stdout, append([]string{flagKubeconfig, d.kubeconfig, "cluster", "discovery", "add", "--cluster", clusterName}, others...)...); err != nil {
		return err
	}

	ui, err := d.startUI(ctx)
	if err != nil {
		return err
	}

	defer ui.stop()

	users, err := d.users(ctx)
	if err != nil {
		return err
	}

	store, err := d.startBackups(ctx)
	if err != nil {
		return err
	}

	defer func() {
		fmt.Println("ichor-demo: stopping the S3 server")
		_ = store.Stop()
	}()

	d.next(world, machines, users)
	fmt.Printf("ichor-demo: ready %s after start\n", time.Since(started).Round(time.Second))

	select {
	case <-ctx.Done():
	case err := <-ui.exited:
		return fmt.Errorf("`ichor ui` stopped: %w; its log is %s", err, ui.log)
	}

	return nil
}

func prepare(stateDir, binDir string, fresh bool) (*demo, error) {
	if fresh {
		if err := os.RemoveAll(stateDir); err != nil {
			return nil, fmt.Errorf("removing %s: %w", stateDir, err)
		}
	}

	state, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}

	if binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}

		binDir = filepath.Dir(exe)
	}

	for _, b := range []string{"ichor", "ichor-controller", "ichor-installer", "ichor-ui"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s is missing in %s: run `go tool task build` (or `go tool task demo`, which builds it)", b, binDir)
		}
	}

	d := &demo{state: state, bin: binDir, kubeconfig: filepath.Join(state, "kubeconfig"), passFile: filepath.Join(state, "passphrase")}

	// The demo's secrets store lives in the state directory, under a
	// passphrase kept next to it: a demo convenience a real cluster must not copy.
	if _, err := os.Stat(d.passFile); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(d.passFile, []byte(rand.Text()+"\n"), 0o600); err != nil {
			return nil, err
		}
	}

	d.env = append(os.Environ(), "ICHOR_HOME="+filepath.Join(state, "home"))

	return d, nil
}

func (d *demo) initArgs(first string) []string {
	return []string{
		"init", "--cluster", clusterName, "--preset", "standard", "--node", first,
		// The installer Job installs Ichor in the cluster.
		"--install", "manifest",
		"--write-kubeconfig", d.kubeconfig, "--passphrase-file", d.passFile, "--timeout", "8m",
		"--ui-url", d.uiURL,
	}
}

// ichor runs the CLI with the demo's secrets store.
func (d *demo) ichor(ctx context.Context, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "ichor"), args...) //nolint:gosec // our own binary
	cmd.Env, cmd.Stdout, cmd.Stderr = d.env, out, os.Stderr

	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ichor %s: %w", strings.Join(args, " "), err)
	}

	return nil
}

// process is a program the demo started and stops.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan error
}

// start runs one of the demo's binaries against the emulated cluster, its
// output in <state>/<name>.log. It is not bound to ctx: Ctrl-C stops it
// with SIGTERM (stop), so that it can let go of its work.
func (d *demo) start(ctx context.Context, name string, args ...string) (*process, error) {
	p := &process{name: name, log: filepath.Join(d.state, name+".log"), exited: make(chan error, 1)}

	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}

	p.cmd = exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(d.bin, name), args...) //nolint:gosec // our own binary
	p.cmd.Env = append(slices.Clone(d.env), "KUBECONFIG="+d.kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf

	if err := p.cmd.Start(); err != nil {
		_ = logf.Close()

		return nil, fmt.Errorf("starting %s: %w", name, err)
	}

	go func() {
		p.exited <- p.cmd.Wait()
		_ = logf.Close()
	}()

	return p, nil
}

// startUI starts `ichor ui`, which port-forwards the console's address (the
// loopback URL init recorded with --ui-url) to the in-cluster ichor-ui, the
// issuer of Ichor's own users there, and waits until the console answers.
func (d *demo) startUI(ctx context.Context) (*process, error) {
	ui, err := d.start(ctx, "ichor", "ui")
	if err != nil {
		return nil, err
	}

	// ichor-ui's certificate is for its Service's names, not for the
	// forwarded address: the readiness probe cannot verify it, and checks
	// nothing else.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above

	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.uiURL+"/readyz", nil)
		if err != nil {
			ui.stop()

			return nil, err
		}

		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}

		select {
		case <-ctx.Done():
			ui.stop()

			return nil, ctx.Err()
		case err := <-ui.exited:
			return nil, fmt.Errorf("`ichor ui` stopped at start (%w); its log is %s", err, ui.log)
		case <-time.After(500 * time.Millisecond):
		}

		if time.Now().After(deadline) {
			ui.stop()

			return nil, fmt.Errorf("the console did not answer ready at %s within 2 minutes; the log of `ichor ui` is %s", d.uiURL, ui.log)
		}
	}

	fmt.Printf("ichor-demo: `ichor ui` (process %d) forwards %s to the ichor-ui pod; its log: %s\n", ui.cmd.Process.Pid, d.uiURL, ui.log)

	return ui, nil
}

// demoUser is one of the demo's web console users and its password.
type demoUser struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	role     string
}

// users creates the demo's users admin and viewer with generated passwords
// (`ichor user create`); on a second run they exist, and get new ones
// (`ichor user set-password`), since nothing keeps the old ones.
func (d *demo) users(ctx context.Context) ([]demoUser, error) {
	out := make([]demoUser, 0, 2)

	var list bytes.Buffer
	if err := d.ichor(ctx, &list, flagKubeconfig, d.kubeconfig, "-o", "json", "user", "list"); err != nil {
		return nil, err
	}

	var existing struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(list.Bytes(), &existing); err != nil {
		return nil, fmt.Errorf("reading `ichor user list`: %w", err)
	}

	exists := map[string]bool{}
	for _, i := range existing.Items {
		exists[i.Metadata.Name] = true
	}

	for _, u := range []demoUser{{Name: "admin", role: "admin"}, {Name: "viewer", role: "viewer"}} {
		args := []string{flagKubeconfig, d.kubeconfig, "-o", "json", "user", "create", u.Name, "--role", u.role}
		if exists[u.Name] {
			args = []string{flagKubeconfig, d.kubeconfig, "-o", "json", "user", "set-password", u.Name}
		}

		var buf bytes.Buffer
		if err := d.ichor(ctx, &buf, args...); err != nil {
			return nil, err
		}

		if err := json.Unmarshal(buf.Bytes(), &u); err != nil {
			return nil, fmt.Errorf("reading the password of demo user %s: %w", u.Name, err)
		}

		if u.Password == "" {
			return nil, fmt.Errorf("`ichor user` printed no password for demo user %s", u.Name)
		}

		out = append(out, u)
	}

	return out, nil
}

func (p *process) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}

	fmt.Printf("ichor-demo: stopping %s\n", p.name)

	_ = p.cmd.Process.Signal(syscall.SIGTERM)

	var err error

	select {
	case err = <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.exited
	}

	if err != nil {
		fmt.Printf("ichor-demo: %s: %v\n", p.name, err)
	}
}

func (d *demo) next(world *talosemu.World, machines []*talosemu.Machine, users []demoUser) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}

		return p
	}

	fmt.Printf(`
The demo cluster %q runs: its first control plane %s was initialised by ichor init,
ichor-controller manages it from inside it (two replicas once a second node is
Ready, admission webhooks on), and the other machines wait in maintenance mode.

  machines:        `, clusterName, machines[0].IP())

	for i, m := range machines {
		if i > 0 {
			fmt.Print(", ")
		}

		fmt.Printf("%s %s", m.Name(), m.IP())
	}

	fmt.Printf(`
  control API:     %s (power-off, wipe-disk, ...; tools/talosemu/README.md)
  controller log:  kubectl logs -n ichor-system deploy/ichor-controller (kubectl: %s)
  web console:     %s (forwarded by `+"`ichor ui`"+` to the ichor-ui pod, its log in %s;
                   the certificate names ichor-ui's Service: accept it in the browser)
  console users:   %s

  The passwords are shown only now; `+"`ichor user set-password NAME`"+` sets new ones.

In another terminal:

  export KUBECONFIG=%s ICHOR_HOME=%s PATH=%s:$PATH
  ichor machine list                                   # 4 pending machines (discovery finds them in a few seconds)
  ichor machine approve MACHINE --role controlplane    # two of them, then
  ichor machine approve MACHINE --role worker          # the others
  ichor machine list --watch                           # until all are Ready
  ichor node remove MACHINE --reboot                   # a removed machine comes back as pending
  ichor ui                                             # the web console's address (the demo forwards it already)
  ichor etcd backup now demo-hourly --wait             # an etcd snapshot to the demo's S3 server (versitygw at %s)
  ichor etcd backup list                               # the snapshots; their age identity is %s

Press Ctrl-C to stop everything; `+"`go tool task demo`"+` again resumes this cluster,
`+"`go tool task demo -- --fresh`"+` starts a new one.
`, world.ControlURL(), filepath.Join(os.Getenv(testenv.AssetsEnv), "kubectl"), d.uiURL, rel(filepath.Join(d.state, "ichor.log")), describeUsers(users),
		d.kubeconfig, filepath.Join(d.state, "home"), d.bin, d.s3Endpoint, rel(d.ageKey))
}

func describeUsers(users []demoUser) string {
	parts := make([]string, 0, len(users))
	for _, u := range users {
		parts = append(parts, fmt.Sprintf("%s (%s) password %s", u.Name, u.role, u.Password))
	}

	return strings.Join(parts, ";  ")
}

// demoS3Listen is where the demo's S3 server listens.
const demoS3Listen = "127.0.0.1:9900"

// startBackups starts a real S3 server (versitygw) for the demo's backups
// on loopback, with its data in the state directory, and creates the
// TalosEtcdBackup demo-hourly with its Secrets: the S3 credentials of this
// run and the age recipient of an identity kept in the state directory (a
// demo convenience: a real cluster keeps the identity elsewhere).
func (d *demo) startBackups(ctx context.Context) (*testenv.S3, error) {
	store, err := testenv.StartS3(ctx, filepath.Join(d.state, "s3"), demoS3Listen, "etcd-backups")
	if err != nil {
		return nil, fmt.Errorf("starting the demo's S3 server: %w", err)
	}

	d.s3Endpoint, d.ageKey = store.Endpoint, filepath.Join(d.state, "backup-age.key")

	if _, err := os.Stat(d.ageKey); errors.Is(err, os.ErrNotExist) {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			_ = store.Stop()

			return nil, err
		}

		if err := os.WriteFile(d.ageKey, []byte(id.String()+"\n"), 0o600); err != nil {
			_ = store.Stop()

			return nil, err
		}
	}

	key, err := os.ReadFile(d.ageKey)
	if err != nil {
		_ = store.Stop()

		return nil, err
	}

	id, err := age.ParseX25519Identity(strings.TrimSpace(string(key)))
	if err != nil {
		_ = store.Stop()

		return nil, fmt.Errorf("%s is not an age identity: remove it to make a new one", d.ageKey)
	}

	// %q quotes as JSON does, which YAML reads.
	raw := fmt.Appendf(nil, `apiVersion: v1
kind: Secret
metadata: {name: demo-backup-s3, namespace: default}
stringData: {accessKeyID: %q, secretAccessKey: %q}
---
apiVersion: v1
kind: Secret
metadata: {name: demo-backup-age, namespace: default}
stringData: {recipients: %q}
---
apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosEtcdBackup
metadata: {name: demo-hourly, namespace: default}
spec:
  clusterName: %q
  schedule: "0 * * * *"
  s3: {endpoint: %q, bucket: etcd-backups, credentialsRef: {name: demo-backup-s3}}
  retention: {count: 24}
  encryptionKeyRef: {name: demo-backup-age}
`, store.AccessKeyID, store.SecretAccessKey, id.Recipient().String(), clusterName, store.Endpoint)

	kubectl := filepath.Join(os.Getenv(testenv.AssetsEnv), "kubectl")
	cmd := exec.CommandContext(ctx, kubectl, flagKubeconfig, d.kubeconfig, "apply", "-f", "-") //nolint:gosec // the test binaries
	cmd.Env, cmd.Stdin, cmd.Stderr = d.env, bytes.NewReader(raw), os.Stderr

	if err := cmd.Run(); err != nil {
		_ = store.Stop()

		return nil, fmt.Errorf("creating the demo's TalosEtcdBackup: %w", err)
	}

	fmt.Printf("ichor-demo: S3 (versitygw) serves etcd backups at %s; TalosEtcdBackup demo-hourly takes one every hour\n", store.Endpoint)

	return store, nil
}
