package talosemu

import (
	"context"
	"os"
)

// startServices starts what a running control plane runs besides apid: the etcd member and,
// once etcd serves, the Kubernetes control plane; every machine runs the kubelet simulation
// (kubelet.go). It is a no-op when they run.
func (m *Machine) startServices() {
	if !m.Powered() {
		// a boot that raced with a power-off
		return
	}

	cp := m.isControlPlane()

	m.svcMu.Lock()
	defer m.svcMu.Unlock()

	if m.svcCancel != nil {
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	m.svcCancel = cancel

	m.svcWG.Add(2)

	go func() {
		defer m.svcWG.Done()

		if cp {
			m.etcdService(ctx)
			m.kubeService(ctx)
		}
	}()

	go func() {
		defer m.svcWG.Done()

		m.kubeletService(ctx)
	}()
}

// stopServices stops the Kubernetes control plane and the etcd member (data stays on disk):
// a powered-off or rebooting control plane is really unavailable.
func (m *Machine) stopServices() {
	m.svcMu.Lock()
	cancel := m.svcCancel
	m.svcCancel = nil
	m.svcMu.Unlock()

	if cancel != nil {
		cancel()
	}

	m.svcWG.Wait()
	m.stopKube()
	m.stopEtcd()

	// machined no longer refreshes its affiliate at the discovery service
	m.world.discoveryDown(m)
}

// wipeEphemeral removes what Talos keeps on EPHEMERAL (/var): the etcd data and a pending
// recovery snapshot.
func (m *Machine) wipeEphemeral() error {
	if err := os.RemoveAll(m.etcdDataDir()); err != nil {
		return err
	}

	if err := os.Remove(m.etcdSnapshotPath()); err != nil && !os.IsNotExist(err) {
		return err
	}

	return nil
}
