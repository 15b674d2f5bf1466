package talosemu_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/tools/testenv"
)

func kubeClientAt(t testing.TB, kubeconfig []byte, host string) *kubernetes.Clientset {
	t.Helper()

	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig from the Kubeconfig RPC: %v", err)
	}

	if host != "" {
		rc.Host = host
	}

	rc.Timeout = 15 * time.Second

	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	return c
}

func kubeClient(t testing.TB, kubeconfig []byte) *kubernetes.Clientset {
	t.Helper()

	return kubeClientAt(t, kubeconfig, "")
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// waitNodes waits until at least want Nodes match.
func waitNodes(t testing.TB, kube *kubernetes.Clientset, want int, match func(corev1.Node) bool, what string) {
	t.Helper()

	testenv.EventuallyOK(t, 90*time.Second, what, func() (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}

		n := 0
		state := ""

		for _, node := range nodes.Items {
			if match(node) {
				n++
			}

			state += fmt.Sprintf("%s ready=%v; ", node.Name, nodeReady(node))
		}

		return n >= want, state
	})
}

// writeCM creates a ConfigMap, retrying until the deadline (the API server may be catching up
// after a member change).
func writeCM(t testing.TB, kube *kubernetes.Clientset, name string, timeout time.Duration) {
	t.Helper()

	testenv.EventuallyOK(t, timeout, "write ConfigMap "+name, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()

		_, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})

		return err == nil, fmt.Sprint(err)
	})
}

func hostnameOf(t testing.TB, cl *client.Client) string {
	t.Helper()

	resp, err := cl.MachineClient.Hostname(t.Context(), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	return resp.GetMessages()[0].GetHostname()
}

// etcdGet reads key from the member on ip with a client certificate of the cluster's etcd CA;
// nil when the key does not exist.
func etcdGet(t testing.TB, c *realCluster, ip, key string) []byte {
	t.Helper()

	cl := etcdClientFor(t, c.bundle, ip)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	resp, err := cl.Get(ctx, key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}

	if len(resp.Kvs) == 0 {
		return nil
	}

	return resp.Kvs[0].Value
}

// etcdClientFor connects to the member on ip with a client certificate of bundle's etcd CA.
func etcdClientFor(t testing.TB, bundle *secrets.Bundle, ip string) *clientv3.Client {
	t.Helper()

	ca := bundle.Certs.Etcd

	caCert, err := ca.GetCert()
	if err != nil {
		t.Fatal(err)
	}

	caKey, err := ca.GetKey()
	if err != nil {
		t.Fatal("etcd CA key does not parse")
	}

	key2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &stdx509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caCert, &key2.PublicKey, caKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}

	pool := stdx509.NewCertPool()
	pool.AddCert(caCert)

	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"https://" + ip + ":2379"},
		TLS:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key2}}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = cl.Close() })

	return cl
}

// childProcs returns pid → command name of this process's direct children.
func childProcs(t testing.TB) map[int]string {
	t.Helper()

	self := os.Getpid()
	out := map[int]string{}

	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}

	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}

		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndex(s, ")")

		if i < 0 {
			continue
		}

		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}

		if ppid, _ := strconv.Atoi(fields[1]); ppid == self {
			out[pid] = s[strings.Index(s, "(")+1 : i]
		}
	}

	return out
}

// rssBytes is the resident set size of pid (VmRSS).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}

	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)

			return kb << 10
		}
	}

	return 0
}

// clusterRSS sums the RSS of this process (etcd members, apids, kubelet simulation) and of its
// child processes (kube-apiserver, controller-manager, scheduler).
func clusterRSS(t testing.TB) (total int64, detail string) {
	t.Helper()

	total = rssBytes(os.Getpid())
	detail = fmt.Sprintf("test process %d MiB", total>>20)

	for pid, name := range childProcs(t) {
		r := rssBytes(pid)
		total += r
		detail += fmt.Sprintf(", %s %d MiB", name, r>>20)
	}

	return total, detail
}

// podsReadyOn counts the Ready pods of the app=emu Deployment on a Node.
func podsReadyOn(t testing.TB, kube *kubernetes.Clientset, node string) int {
	t.Helper()

	pods, err := kube.CoreV1().Pods("emu-apps").List(t.Context(), metav1.ListOptions{LabelSelector: "app=emu", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return -1
	}

	n := 0

	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				n++
			}
		}
	}

	return n
}
