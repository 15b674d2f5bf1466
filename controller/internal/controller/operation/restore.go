package operation

// The etcd restore into the live cluster (TalosOperation type etcd-restore;
// architecture, "Backup, recovery, certificates"; issue 23). It follows
// Talos's documented recovery procedure (Talos "Disaster Recovery",
// t:website/content/v1.10/advanced/disaster-recovery.md): every control
// plane's EPHEMERAL partition is wiped so that its etcd service waits in
// Preparing, the snapshot is uploaded to one of them with EtcdRecover, that
// one is bootstrapped with recover_etcd, and the others join it.
//
// Operation steps (status.step), each with its machines' steps
// (status.machines[].step):
//
//   - select: the cluster's configured control planes, by name; the first
//     is the one bootstrapped.
//   - restore-check: the backup and its store (outside the cluster), the
//     identity Secret, the snapshot downloaded, decrypted and checked end to
//     end (contracts/pkg/etcdbackup/fetch), every control plane answering as
//     itself, running and ready (guard.CheckRestoreControlPlanes; etcd's
//     health does not count). The PreChecksPassed condition. Then the marker is written next
//     to the backups (etcdbackup.Marker): nothing has been stopped yet.
//   - restore-reset: every control plane is sent Talos's recovery reset
//     (reclaim.EtcdRecoveryReset), each recorded first (reset-sent, with its
//     boot ID) in status and in the marker.
//   - restore-wait-preparing: each comes back on a new boot, running, its
//     etcd service Preparing. A node whose etcd runs once all are back joined
//     a member that had not gone down yet: it is reset once more
//     (reset-again-sent, recorded first); a second time pauses the operation.
//   - restore-upload: EtcdRecover of the checked snapshot to the first
//     control plane (upload-sent, recorded first).
//   - restore-bootstrap: Bootstrap{recover_etcd} on it (bootstrap-sent,
//     recorded first). Talos restores the snapshot into a new one-member
//     cluster and starts etcd.
//   - restore-wait-etcd: its etcd answers.
//   - restore-rejoin: every control plane is a voting member and answers.
//   - restore-wait-api: the Kubernetes API answers /readyz; the marker is
//     marked Succeeded, then the operation.
//
// Every record is a strict status write (s.Persist) followed by the
// marker's write; a marker that cannot be written sends nothing. A reconcile
// that finds a machine recorded as sent never sends to it again; one that
// finds the marker ahead of the status (a new controller, or an operation
// recreated from the marker after the restore rolled the API back past it)
// takes the state from the marker.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/fetch"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/verify"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/backupstore"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Steps of the etcd restore (status.step).
const (
	opStepRestoreCheck     = "restore-check"
	opStepRestoreReset     = "restore-reset"
	opStepRestorePreparing = "restore-wait-preparing"
	opStepRestoreUpload    = "restore-upload"
	opStepRestoreBootstrap = "restore-bootstrap"
	opStepRestoreEtcd      = "restore-wait-etcd"
	opStepRestoreRejoin    = "restore-rejoin"
	opStepRestoreAPI       = "restore-wait-api"
)

// Machine steps of the etcd restore (status.machines[].step).
const (
	rstepResetSent      = "reset-sent"
	rstepResetAgainSent = "reset-again-sent"
	rstepPreparing      = "preparing"
	rstepUploadSent     = "upload-sent"
	rstepBootstrapSent  = "bootstrap-sent"
	rstepJoining        = "joining"
	rstepMember         = "member"
)

// restoreSteps are the operation steps in order: a marker whose step comes
// later than the status's is ahead of it.
var restoreSteps = []string{
	opStepSelect, opStepRestoreCheck, opStepRestoreReset, opStepRestorePreparing, opStepRestoreUpload,
	opStepRestoreBootstrap, opStepRestoreEtcd, opStepRestoreRejoin, opStepRestoreAPI,
}

func isRestore(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationEtcdRestore && op.Spec.EtcdRestore != nil
}

// restore is one reconcile of an etcd restore with what it needs.
type restore struct {
	r      *Reconciler
	s      *scope
	op     *ichorv1alpha1.TalosOperation
	backup *ichorv1alpha1.TalosEtcdBackup
	st     *store.Store
	bundle *secrets.Bundle
	// key is the marker's key, marker the marker as stored (nil before the
	// first write).
	key    string
	marker *etcdbackup.Marker
}

// markerUID is the UID of the operation whose marker this one continues:
// its own, or the one a recreated operation carries.
func markerUID(op *ichorv1alpha1.TalosOperation) string {
	if uid := op.Annotations[ichorv1alpha1.RestoreMarkerAnnotation]; uid != "" {
		return uid
	}

	return string(op.UID)
}

// restorePhase runs one step of an etcd restore; the later phases (select,
// precheck, rollout) leave restores alone.
func (r *Reconciler) restorePhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if !isRestore(op) || halted(op) {
		return ctrl.Result{}, nil
	}

	rs, failure, err := r.openRestore(ctx, s)
	if err != nil || failure != "" {
		if failure != "" {
			r.fail(op, nil, stepName(op), failure)
		}

		return ctrl.Result{}, err
	}

	if done, err := rs.adopt(ctx); done || err != nil {
		return ctrl.Result{}, err
	}

	switch op.Status.Step {
	case "", opStepSelect:
		return rs.selectMachines(ctx)
	case opStepRestoreCheck:
		return rs.check(ctx)
	case opStepRestoreReset:
		return rs.reset(ctx)
	case opStepRestorePreparing:
		return rs.waitPreparing(ctx)
	case opStepRestoreUpload:
		return rs.upload(ctx)
	case opStepRestoreBootstrap:
		return rs.bootstrap(ctx)
	case opStepRestoreEtcd:
		return rs.waitEtcd(ctx)
	case opStepRestoreRejoin:
		return rs.waitRejoin(ctx)
	case opStepRestoreAPI:
		return rs.waitAPI(ctx)
	default:
		r.fail(op, nil, op.Status.Step, "unknown step "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// openRestore reads the backup, connects to its store and reads the
// cluster's bundle; failure says what is wrong with them (the operation
// pauses on it).
func (r *Reconciler) openRestore(ctx context.Context, s *scope) (*restore, string, error) {
	op := s.Object
	rs := &restore{r: r, s: s, op: op}

	b := &ichorv1alpha1.TalosEtcdBackup{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: op.Spec.EtcdRestore.BackupName}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("TalosEtcdBackup %q does not exist in namespace %s: the restore reads its snapshot and keeps its marker in that backup's store",
				op.Spec.EtcdRestore.BackupName, op.Namespace), nil
		}

		return nil, "", err
	}

	rs.backup = b

	st, f := backupstore.Open(ctx, r.APIReader, b, r.Transport)
	if f != nil {
		return nil, f.Msg, nil //nolint:nilerr // the failure pauses the operation with its message
	}

	rs.st = st

	bundle, err := machinestate.LoadBundle(ctx, r.APIReader, s.Cluster)
	if err != nil {
		if machinestate.IsStalled(err) {
			return nil, err.Error(), nil
		}

		return nil, "", err
	}

	rs.bundle = bundle
	rs.key = etcdbackup.MarkerKey(b.Spec.S3.Prefix, op.Namespace, op.Spec.ClusterName, op.Name, markerUID(op))

	return rs, "", nil
}

// adopt reads the marker once the restore may have written one and, when it
// is ahead of the status, takes the state from it; a marker of an ended
// restore ends the operation the same way (done).
func (rs *restore) adopt(ctx context.Context) (bool, error) {
	op := rs.op

	recreated := op.Annotations[ichorv1alpha1.RestoreMarkerAnnotation] != ""
	if !recreated && slices.Index(restoreSteps, op.Status.Step) <= slices.Index(restoreSteps, opStepRestoreCheck) {
		return false, nil
	}

	m, err := rs.st.GetMarker(ctx, rs.key)
	if err != nil {
		rs.r.fail(op, nil, stepName(op), "cannot read the restore's marker "+rs.key+": "+err.Error())

		return true, nil //nolint:nilerr // the operation pauses on it; resuming reads it again
	}

	if m == nil {
		if recreated {
			rs.r.fail(op, nil, stepName(op), "the restore's marker "+rs.key+" is not in the store, so this recreated operation cannot know where the restore stands; "+
				"delete it and, if the cluster's etcd does not run, start a new restore")

			return true, nil
		}

		// The check step wrote it; a store that lost it is the store's fault,
		// and the status knows where the restore stands.
		return false, nil
	}

	rs.marker = m

	if m.Sequence > op.Status.ProgressSequence || (recreated && op.Status.Step == "") {
		op.Status.Step = m.Step
		op.Status.Machines = slices.Clone(m.Machines)
		op.Status.ProgressSequence = m.Sequence
		op.Status.To = snapshotLabel(m.Snapshot.Key, m.Snapshot.Revision)
		rs.r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "RestoreResumed", "Marker",
			"took the restore's progress from its marker %s: step %s", rs.key, m.Step)
	}

	if m.Done() && !completed(op) {
		phase := ichorv1alpha1.OperationSucceeded
		reason := ichorv1alpha1.SucceededReason

		if m.Phase == etcdbackup.MarkerFailed {
			phase, reason = ichorv1alpha1.OperationFailed, ichorv1alpha1.FailedReason
		}

		return true, rs.r.complete(ctx, rs.s, phase, reason, m.Message)
	}

	return false, nil
}

func snapshotLabel(key string, revision int64) string {
	return fmt.Sprintf("%s (etcd revision %d)", path.Base(key), revision)
}

// snapshotKey is the object key of the spec's snapshot: as the backup lists
// it, else a key as given, else a name under the cluster's snapshots folder.
func (rs *restore) snapshotKey() string {
	name := rs.op.Spec.EtcdRestore.Snapshot
	if s, ok := guard.SnapshotListed(rs.backup, name); ok {
		return s.Name
	}

	if strings.Contains(name, "/") {
		return name
	}

	return etcdbackup.SnapshotsPrefix(rs.backup.Spec.S3.Prefix, rs.op.Namespace, rs.op.Spec.ClusterName) + name
}

// dir is where the restore keeps the checked snapshot.
func (rs *restore) dir() (string, error) {
	base := rs.r.TempDir
	if base == "" {
		base = os.TempDir()
	}

	d := filepath.Join(base, "ichor-etcd-restore-"+markerUID(rs.op))

	return d, os.MkdirAll(d, 0o700)
}

func (rs *restore) poll() ctrl.Result { return ctrl.Result{RequeueAfter: rs.r.PollInterval} }

// fail pauses the restore on a failed step (of a machine when mp is set).
func (rs *restore) fail(mp *ichorv1alpha1.MachineProgress, msg string) (ctrl.Result, error) {
	rs.r.fail(rs.op, mp, rs.op.Status.Step, msg)

	return ctrl.Result{}, nil
}

// next moves the restore to step.
func (rs *restore) next(step, msg string) (ctrl.Result, error) {
	rs.op.Status.Step = step
	rs.op.Status.ProgressSequence++
	setCond(rs.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, msg)

	return ichorreconcile.NextStep(), nil
}

// markerError is a marker that could not be written: nothing was sent.
type markerError struct{ err error }

func (e *markerError) Error() string { return e.err.Error() }

// record writes the status strictly, then the marker: engineering rule 10's
// record before a call that cannot be repeated, kept where the rolled-back
// API cannot lose it. A status conflict is returned as it is (the decision
// was taken on a stale read; nothing is sent); a marker that cannot be
// written is a *markerError.
func (rs *restore) record(ctx context.Context, msg string) error {
	op := rs.op
	op.Status.ProgressSequence++

	if err := rs.s.Persist(ctx); err != nil {
		return err
	}

	m := &etcdbackup.Marker{
		Namespace: op.Namespace, Cluster: op.Spec.ClusterName, Operation: op.Name, OperationUID: markerUID(op),
		Spec: *op.Spec.DeepCopy(), Phase: etcdbackup.MarkerRunning, StartedAt: rs.r.now().UTC(),
	}
	if rs.marker != nil {
		m.Snapshot, m.StartedAt = rs.marker.Snapshot, rs.marker.StartedAt
	}

	m.Spec.Paused = false
	m.Step, m.Sequence, m.Message, m.UpdatedAt = op.Status.Step, op.Status.ProgressSequence, msg, rs.r.now().UTC()
	m.Bootstrapped = slices.Index(restoreSteps, op.Status.Step) >= slices.Index(restoreSteps, opStepRestoreBootstrap)

	for _, p := range op.Status.Machines {
		m.Machines = append(m.Machines, *p.DeepCopy())
	}

	if err := rs.st.PutMarker(ctx, rs.key, m); err != nil {
		return &markerError{err: err}
	}

	rs.marker = m

	return nil
}

// recordOrFail records, and turns a marker failure into the step's failure.
func (rs *restore) recordOrFail(ctx context.Context, msg string, undo func()) (bool, ctrl.Result, error) {
	err := rs.record(ctx, msg)

	var me *markerError
	if errors.As(err, &me) {
		undo()

		res, ferr := rs.fail(nil, "the restore's marker could not be written to the backup store, so nothing was sent: "+me.Error())

		return false, res, ferr
	}

	if err != nil {
		return false, ctrl.Result{}, err
	}

	return true, ctrl.Result{}, nil
}

// selectMachines records the cluster's configured control planes by name.
func (rs *restore) selectMachines(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	op.Status.Step = opStepSelect

	cps, err := rs.r.controlPlanes(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(cps) == 0 {
		return rs.fail(nil, "cluster "+op.Spec.ClusterName+" has no provisioned control plane to restore etcd onto")
	}

	slices.SortFunc(cps, func(a, b ichorv1alpha1.TalosMachine) int { return strings.Compare(a.Name, b.Name) })

	op.Status.Machines = make([]ichorv1alpha1.MachineProgress, 0, len(cps))
	for _, m := range cps {
		op.Status.Machines = append(op.Status.Machines, ichorv1alpha1.MachineProgress{Name: m.Name, Role: m.Spec.Role, Phase: ichorv1alpha1.MachinePending})
	}

	return rs.next(opStepRestoreCheck, fmt.Sprintf("checking snapshot %s before anything is stopped; %d control plane(s), %s bootstrapped from it",
		path.Base(rs.snapshotKey()), len(cps), cps[0].Name))
}

// verified dials the machine of mp and checks it is that machine.
func (rs *restore) verified(ctx context.Context, mp *ichorv1alpha1.MachineProgress) (*talos.Verified, error) {
	m, err := rs.r.machine(ctx, rs.op, mp.Name)
	if err != nil {
		return nil, err
	}

	if m == nil {
		return nil, fmt.Errorf("TalosMachine %s no longer exists", mp.Name)
	}

	n, err := rs.r.Nodes.Dial(ctx, m.Spec.Address, rs.bundle)
	if err != nil {
		return nil, err
	}

	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(m))
	if err != nil {
		n.Close()

		return nil, err
	}

	return v, nil
}

// fetch downloads, decrypts and checks the snapshot into the restore's directory.
func (rs *restore) fetch(ctx context.Context) (*fetch.Snapshot, error) {
	ids, err := backupstore.Identities(ctx, rs.r.APIReader, rs.op.Namespace, rs.op.Spec.EtcdRestore.IdentityRef)
	if err != nil {
		return nil, err
	}

	dir, err := rs.dir()
	if err != nil {
		return nil, err
	}

	return fetch.Fetch(ctx, rs.st, rs.snapshotKey(), ids, dir)
}

// check verifies the snapshot and the control planes, then writes the
// marker: the last step before anything is stopped.
func (rs *restore) check(ctx context.Context) (ctrl.Result, error) {
	op := rs.op

	if why := guard.BackupStoreInCluster(rs.backup, rs.s.Cluster); why != "" {
		return rs.fail(nil, fmt.Sprintf("the store of TalosEtcdBackup %s lives inside the cluster (%s): the restore writes its marker there once the API server is down; "+
			"restore from a backup whose store is outside the cluster", rs.backup.Name, why))
	}

	if err := rs.st.Check(ctx); err != nil {
		return rs.fail(nil, "the backup store does not answer: "+err.Error())
	}

	snap, err := rs.fetch(ctx)
	if err != nil {
		msg := "the snapshot could not be read back: " + err.Error()
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, msg)

		return rs.fail(nil, msg+"; nothing was stopped")
	}

	cps := make([]guard.RestoreControlPlane, 0, len(op.Status.Machines))

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		cp := guard.RestoreControlPlane{Name: mp.Name}

		if v, err := rs.verified(ctx, mp); err != nil {
			cp.Unreachable = talos.Message(err)
		} else {
			cp.Stage, cp.Ready, err = v.Stage(ctx)
			v.Close()

			if err != nil {
				cp.Stage, cp.Ready = "", false
			}
		}

		cps = append(cps, cp)
	}

	if ref := guard.CheckRestoreControlPlanes(cps); ref != nil {
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, ref.Rule)

		return rs.fail(nil, ref.Rule+"; nothing was stopped; "+ref.WayOut)
	}

	key := rs.snapshotKey()
	op.Status.To = snapshotLabel(key, snap.Verified.Revision)
	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason, fmt.Sprintf(
		"snapshot %s downloaded, decrypted and checked (etcd revision %d, %d keys, taken %s from %s); every control plane answers",
		path.Base(key), snap.Verified.Revision, snap.Verified.TotalKeys, snap.Meta.TakenAt.UTC().Format(time.RFC3339), snap.Meta.Node))

	rs.marker = &etcdbackup.Marker{
		StartedAt: rs.r.now().UTC(),
		Snapshot:  etcdbackup.MarkerSnapshot{Key: key, Revision: snap.Verified.Revision, EtcdHash: snap.Verified.Hash, SHA256: snap.Verified.SHA256},
	}
	op.Status.Step = opStepRestoreReset

	if ok, res, err := rs.recordOrFail(ctx, "the snapshot is checked; the control planes are reset next", func() { op.Status.Step = opStepRestoreCheck }); !ok {
		return res, err
	}

	rs.r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, "RestoreStarting", "Restore",
		"restoring %s into cluster %s: every control plane's etcd data is wiped next, and the Kubernetes API goes away until the snapshot runs; "+
			"what was written after the snapshot is lost. The progress is kept in %s", path.Base(key), op.Spec.ClusterName, rs.key)

	return rs.next(opStepRestoreReset, "resetting the control planes' etcd data (EPHEMERAL), as Talos's recovery procedure does")
}

// reset sends every control plane not yet sent Talos's recovery reset,
// recorded first (with each node's boot ID); they are all reached and
// checked before any is sent.
func (rs *restore) reset(ctx context.Context) (ctrl.Result, error) {
	op := rs.op

	type target struct {
		mp   *ichorv1alpha1.MachineProgress
		node *talos.Verified
	}

	var targets []target

	closeAll := func() {
		for _, t := range targets {
			t.node.Close()
		}
	}

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		if mp.Step != "" {
			continue
		}

		v, err := rs.verified(ctx, mp)
		if err != nil {
			closeAll()

			return rs.fail(mp, "cannot reach the node as itself before its reset, so no control plane was reset in this pass: "+talos.Message(err))
		}

		boot, err := v.BootID(ctx)
		if err != nil {
			v.Close()
			closeAll()

			return rs.fail(mp, talos.Message(err))
		}

		mp.BootID = boot
		targets = append(targets, target{mp: mp, node: v})
	}

	defer closeAll()

	for _, t := range targets {
		now := metav1.NewTime(rs.r.now())
		t.mp.Phase, t.mp.StartedAt = ichorv1alpha1.MachineInProgress, &now
		rs.r.next(op, t.mp, rstepResetSent, "reset requested: EPHEMERAL (the etcd data) wiped, then a reboot")
	}

	if len(targets) > 0 {
		undo := func() {
			for _, t := range targets {
				t.mp.Step = ""
			}
		}
		if ok, res, err := rs.recordOrFail(ctx, "resetting "+strings.Join(names(targets, func(t target) string { return t.mp.Name }), ", "), undo); !ok {
			return res, err
		}
	}

	// Sent together: a node that comes back early joins any old member still
	// up (waitPreparing resets it again), so the fewer such members the better.
	errs := make([]error, len(targets))

	var wg sync.WaitGroup

	for i, t := range targets {
		wg.Go(func() { errs[i] = t.node.Reset(ctx, reclaim.EtcdRecoveryReset()) })
	}

	wg.Wait()

	var failed []string

	for i, t := range targets {
		if errs[i] != nil {
			t.mp.Step = ""
			failed = append(failed, fmt.Sprintf("%s: %s", t.mp.Name, talos.Message(errs[i])))

			continue
		}

		rs.r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, "EtcdReset", "Reset", "reset %s: EPHEMERAL (its etcd data) wiped, rebooting", t.mp.Name)
	}

	if len(failed) > 0 {
		return rs.fail(nil, "the reset was refused by "+strings.Join(failed, "; ")+"; resuming sends it to those nodes only")
	}

	return rs.next(opStepRestorePreparing, "waiting for every control plane to come back with its etcd service Preparing")
}

func names[T any](ts []T, f func(T) string) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, f(t))
	}

	return out
}

// restoreState is what one control plane looks like after its reset.
type restoreState int

const (
	// preparedNotBack: not answering, on its old boot, or not running yet.
	preparedNotBack restoreState = iota
	// preparedWaiting: back, its etcd service Preparing (empty, waiting).
	preparedWaiting
	// preparedJoined: back, but its etcd runs: it joined an old member.
	preparedJoined
)

// waitPreparing waits for every control plane to come back on a new boot,
// running, its etcd service Preparing. Once all are back, one whose etcd
// runs is reset once more (recorded first).
func (rs *restore) waitPreparing(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	states := make([]restoreState, len(op.Status.Machines))
	why := make([]string, len(op.Status.Machines))
	allBack := true

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		states[i], why[i] = rs.preparedState(ctx, mp)

		switch states[i] {
		case preparedNotBack:
			allBack = false
			mp.Message = why[i]
		case preparedWaiting:
			if mp.Step != rstepPreparing {
				rs.r.next(op, mp, rstepPreparing, "back on a new boot; its etcd service waits in Preparing")
			}
		case preparedJoined:
			mp.Message = why[i]
		}
	}

	if !allBack {
		if rs.waited(rstepResetSent, rstepResetAgainSent) > rs.r.RebootTimeout {
			var late []string

			for i, p := range op.Status.Machines {
				if states[i] == preparedNotBack {
					late = append(late, p.Name+" ("+why[i]+")")
				}
			}

			return rs.fail(nil, fmt.Sprintf("not every control plane came back within %s of its reset: %s; Ichor sends a reset once: "+
				"check those nodes' consoles (`talosctl -n ADDRESS service etcd` shows Preparing once a node is ready), then resume", rs.r.RebootTimeout, strings.Join(late, "; ")))
		}

		return rs.poll(), nil
	}

	var again []int

	for i, st := range states {
		if st == preparedJoined {
			again = append(again, i)
		}
	}

	if len(again) == 0 {
		return rs.next(opStepRestoreUpload, "every control plane's etcd waits in Preparing; uploading the snapshot to "+op.Status.Machines[0].Name)
	}

	return rs.resetAgain(ctx, again, why)
}

// waited is how long the oldest wait of the machines whose step is one of
// steps has lasted (zero when none is at one): each step of a machine starts
// its clock when it is recorded.
func (rs *restore) waited(steps ...string) time.Duration {
	var first time.Time

	for _, p := range rs.op.Status.Machines {
		if !slices.Contains(steps, p.Step) || p.StepStartedAt == nil {
			continue
		}

		if first.IsZero() || p.StepStartedAt.Before(&metav1.Time{Time: first}) {
			first = p.StepStartedAt.Time
		}
	}

	if first.IsZero() {
		return 0
	}

	return rs.r.now().Sub(first)
}

// preparedState reads one control plane after its reset.
func (rs *restore) preparedState(ctx context.Context, mp *ichorv1alpha1.MachineProgress) (restoreState, string) {
	v, err := rs.verified(ctx, mp)
	if err != nil {
		return preparedNotBack, "rebooting: " + talos.Message(err)
	}
	defer v.Close()

	boot, err := v.BootID(ctx)
	if err != nil || boot == mp.BootID {
		return preparedNotBack, "resetting: the node has not left its old boot yet"
	}

	stage, ready, err := v.Stage(ctx)
	if err != nil || stage != ichorv1alpha1.StageRunning || !ready {
		return preparedNotBack, fmt.Sprintf("booting: the node is %s (ready %t)", orUnknown(stage), ready)
	}

	svc, err := v.EtcdService(ctx)
	if err != nil {
		return preparedNotBack, "booting: " + talos.Message(err)
	}

	if svc.State == talos.EtcdServicePreparing {
		return preparedWaiting, ""
	}

	return preparedJoined, fmt.Sprintf("back on a new boot, but its etcd service is %s: it joined a member of the old cluster that had not gone down yet", svc.State)
}

// resetAgain resets, once more, the control planes whose etcd joined an old
// member; a second time pauses the restore.
func (rs *restore) resetAgain(ctx context.Context, idx []int, why []string) (ctrl.Result, error) {
	op := rs.op

	for _, i := range idx {
		if mp := &op.Status.Machines[i]; mp.Step == rstepResetAgainSent {
			return rs.fail(mp, why[i]+", after a second reset too; reset it by hand (`talosctl -n ADDRESS reset --graceful=false --reboot "+
				"--system-labels-to-wipe=EPHEMERAL`), wait for its etcd service to be Preparing, then resume")
		}
	}

	type target struct {
		mp   *ichorv1alpha1.MachineProgress
		node *talos.Verified
	}

	targets := make([]target, 0, len(idx))

	defer func() {
		for _, t := range targets {
			t.node.Close()
		}
	}()

	for _, i := range idx {
		mp := &op.Status.Machines[i]

		v, err := rs.verified(ctx, mp)
		if err != nil {
			return rs.poll(), nil
		}

		boot, err := v.BootID(ctx)
		if err != nil {
			v.Close()

			return rs.poll(), nil
		}

		mp.BootID = boot
		targets = append(targets, target{mp: mp, node: v})
	}

	for _, t := range targets {
		rs.r.next(op, t.mp, rstepResetAgainSent, "reset again: its etcd joined a member of the old cluster that had not gone down yet")
	}

	undo := func() {
		for _, t := range targets {
			t.mp.Step = rstepResetSent
		}
	}
	if ok, res, err := rs.recordOrFail(ctx, "resetting again "+strings.Join(names(targets, func(t target) string { return t.mp.Name }), ", "), undo); !ok {
		return res, err
	}

	for _, t := range targets {
		if err := t.node.Reset(ctx, reclaim.EtcdRecoveryReset()); err != nil {
			return rs.fail(t.mp, "the second reset was refused: "+talos.Message(err))
		}

		rs.r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, "EtcdReset", "Reset",
			"reset %s again: its etcd had joined a member of the old cluster that had not gone down yet", t.mp.Name)
	}

	return rs.poll(), nil
}

// snapshotFile is the checked snapshot on disk: the one the check step
// fetched when it is still there and still the marker's, else fetched again.
func (rs *restore) snapshotFile(ctx context.Context) (string, error) {
	dir, err := rs.dir()
	if err != nil {
		return "", err
	}

	p := filepath.Join(dir, "snapshot.db")
	if v, err := verify.Snapshot(p); err == nil && rs.marker != nil && v.SHA256 == rs.marker.Snapshot.SHA256 {
		return p, nil
	}

	snap, err := rs.fetch(ctx)
	if err != nil {
		return "", err
	}

	if rs.marker != nil && snap.Verified.SHA256 != rs.marker.Snapshot.SHA256 {
		return "", fmt.Errorf("%s is no longer the snapshot the restore checked (its sha256 changed)", rs.marker.Snapshot.Key)
	}

	return snap.Path, nil
}

// upload sends the checked snapshot to the first control plane with
// EtcdRecover, recorded first.
func (rs *restore) upload(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	mp := &op.Status.Machines[0]

	file, err := rs.snapshotFile(ctx)
	if err != nil {
		return rs.fail(nil, "the snapshot could not be read back for the upload: "+err.Error())
	}

	v, err := rs.verified(ctx, mp)
	if err != nil {
		return rs.fail(mp, "cannot reach the node as itself for the upload: "+talos.Message(err))
	}
	defer v.Close()

	prev := mp.Step
	rs.r.next(op, mp, rstepUploadSent, "uploading the snapshot (EtcdRecover)")

	if ok, res, err := rs.recordOrFail(ctx, "uploading the snapshot to "+mp.Name, func() { mp.Step = prev }); !ok {
		return res, err
	}

	f, err := os.Open(file)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer f.Close() //nolint:errcheck // read-only

	if err := v.EtcdRecover(ctx, f); err != nil {
		mp.Step = prev

		return rs.fail(mp, talos.Message(err)+"; resuming uploads it again (an upload replaces the previous one)")
	}

	rs.r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "SnapshotUploaded", "EtcdRecover", "uploaded the snapshot to %s", mp.Name)

	return rs.next(opStepRestoreBootstrap, "bootstrapping etcd on "+mp.Name+" from the snapshot")
}

// bootstrap sends Bootstrap{recover_etcd} to the first control plane,
// recorded first; a reconcile that finds it recorded never sends it again.
func (rs *restore) bootstrap(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	mp := &op.Status.Machines[0]

	if mp.Step == rstepBootstrapSent {
		return rs.next(opStepRestoreEtcd, "the Bootstrap was sent; waiting for etcd on "+mp.Name)
	}

	v, err := rs.verified(ctx, mp)
	if err != nil {
		return rs.fail(mp, "cannot reach the node as itself for the Bootstrap: "+talos.Message(err))
	}
	defer v.Close()

	rs.r.next(op, mp, rstepBootstrapSent, "bootstrapping etcd from the snapshot (Bootstrap with recover_etcd)")

	if ok, res, err := rs.recordOrFail(ctx, "bootstrapping etcd on "+mp.Name+" from the snapshot", func() { mp.Step = rstepUploadSent }); !ok {
		return res, err
	}

	if err := v.BootstrapRecover(ctx); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			// The controller is stopping: the next one finds bootstrap-sent.
			return ctrl.Result{}, ctx.Err()
		}

		mp.Step = rstepUploadSent
		msg := talos.Message(err)

		if status.Code(err) == codes.AlreadyExists || strings.Contains(msg, "not empty") {
			msg += " (the node's etcd data is not empty: reset it by hand with `talosctl -n ADDRESS reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL`, then resume)"
		}

		return rs.fail(mp, msg)
	}

	rs.r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "EtcdBootstrapped", "Bootstrap", "bootstrapped etcd on %s from the snapshot", mp.Name)

	return rs.next(opStepRestoreEtcd, "waiting for etcd on "+mp.Name)
}

// waitEtcd waits for the bootstrapped member to answer. A Bootstrap recorded
// but never answered (the controller stopped in between) that shows no etcd
// within the timeout pauses the restore: resuming sends it again.
func (rs *restore) waitEtcd(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	mp := &op.Status.Machines[0]

	v, err := rs.verified(ctx, mp)
	if err == nil {
		healthy := v.EtcdHealthy(ctx)
		v.Close()

		if healthy {
			now := metav1.NewTime(rs.r.now())
			mp.Phase, mp.CompletedAt = ichorv1alpha1.MachineDone, &now
			rs.r.next(op, mp, rstepMember, "etcd runs the snapshot")

			for i := range op.Status.Machines[1:] {
				rs.r.next(op, &op.Status.Machines[i+1], rstepJoining, "waiting to join etcd")
			}

			return rs.next(opStepRestoreRejoin, "waiting for the other control planes to join etcd")
		}
	}

	if rs.waited(rstepBootstrapSent) > rs.r.RebootTimeout {
		mp.Step = rstepUploadSent
		op.Status.Step = opStepRestoreBootstrap

		return rs.fail(mp, fmt.Sprintf("etcd did not start on %s within %s of the Bootstrap; if the Bootstrap never reached it "+
			"(the controller stopped while it was being sent), resuming sends it again", mp.Name, rs.r.RebootTimeout))
	}

	mp.Message = "waiting for etcd to answer"

	return rs.poll(), nil
}

// waitRejoin waits until every control plane is a voting member and answers.
func (rs *restore) waitRejoin(ctx context.Context) (ctrl.Result, error) {
	op := rs.op
	first := &op.Status.Machines[0]

	v, err := rs.verified(ctx, first)
	if err != nil {
		first.Message = "reading etcd's members: " + talos.Message(err)

		return rs.waitOrFail()
	}

	members, err := v.EtcdMembers(ctx)
	v.Close()

	if err != nil {
		first.Message = talos.Message(err)

		return rs.waitOrFail()
	}

	joined := 0

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		if mp.Step == rstepMember {
			joined++

			continue
		}

		m, err := rs.r.machine(ctx, op, mp.Name)
		if err != nil || m == nil {
			continue
		}

		voting := false

		for _, mem := range members {
			if talos.CompareMember(mem, talos.MachineIdentity(m)) == nil && !mem.Learner {
				voting = true
			}
		}

		if !voting {
			mp.Message = "waiting to join etcd as a voting member"

			continue
		}

		nv, err := rs.verified(ctx, mp)
		if err != nil || !nv.EtcdHealthy(ctx) {
			if nv != nil {
				nv.Close()
			}

			mp.Message = "a voting member; waiting for its etcd to answer"

			continue
		}

		nv.Close()

		now := metav1.NewTime(rs.r.now())
		mp.Phase, mp.CompletedAt = ichorv1alpha1.MachineDone, &now
		rs.r.next(op, mp, rstepMember, "joined etcd")

		joined++
	}

	if joined < len(op.Status.Machines) {
		return rs.waitOrFail()
	}

	return rs.next(opStepRestoreAPI, fmt.Sprintf("etcd runs the snapshot with %d voting members; waiting for the Kubernetes API", joined))
}

// waitOrFail polls until RebootTimeout has passed since the step started.
func (rs *restore) waitOrFail() (ctrl.Result, error) {
	if rs.waited(rstepJoining) > rs.r.RebootTimeout {
		var waiting []string

		for _, p := range rs.op.Status.Machines {
			if p.Step != rstepMember {
				waiting = append(waiting, p.Name+": "+p.Message)
			}
		}

		return rs.fail(nil, fmt.Sprintf("not every control plane rejoined etcd within %s: %s; check their etcd service (`talosctl -n ADDRESS service etcd`), then resume",
			rs.r.RebootTimeout, strings.Join(waiting, "; ")))
	}

	return rs.poll(), nil
}

// waitAPI waits for the Kubernetes API to answer /readyz on a control plane,
// then ends the restore: the marker first, then the operation.
func (rs *restore) waitAPI(ctx context.Context) (ctrl.Result, error) {
	op := rs.op

	cfg, err := rs.r.workloadConfig(ctx, op, rs.bundle)
	if err == nil {
		err = errors.New("no control plane's kube-apiserver answers /readyz yet")

		for _, p := range op.Status.Machines {
			m, merr := rs.r.machine(ctx, op, p.Name)
			if merr != nil || m == nil {
				continue
			}

			if rerr := workload.APIServerReady(ctx, cfg, m.Spec.Address); rerr == nil {
				err = nil

				break
			}
		}
	}

	if err != nil {
		if rs.waited(rstepMember) > rs.r.APIServerTimeout {
			return rs.fail(nil, fmt.Sprintf("etcd runs the snapshot, but the Kubernetes API did not answer within %s: %v; check the control planes' kube-apiserver, then resume",
				rs.r.APIServerTimeout, err))
		}

		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, "waiting for the Kubernetes API: "+err.Error())

		return rs.poll(), nil
	}

	msg := fmt.Sprintf("restored %s into cluster %s: etcd runs it on %d control plane(s) and the Kubernetes API answers; what was written after the snapshot is gone",
		op.Status.To, op.Spec.ClusterName, len(op.Status.Machines))

	if rs.marker != nil {
		m := *rs.marker
		m.Phase, m.Message, m.UpdatedAt = etcdbackup.MarkerSucceeded, msg, rs.r.now().UTC()
		m.Step, m.Sequence = op.Status.Step, op.Status.ProgressSequence

		if err := rs.st.PutMarker(ctx, rs.key, &m); err != nil {
			// The marker must say so before the operation ends: a running
			// marker without its operation is recreated.
			setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, "writing the restore's marker: "+err.Error())

			return rs.poll(), nil //nolint:nilerr // written again at the next poll
		}
	}

	if dir, err := rs.dir(); err == nil {
		_ = os.RemoveAll(dir)
	}

	return ctrl.Result{}, rs.r.complete(ctx, rs.s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason, msg)
}
