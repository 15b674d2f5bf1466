package ichorupgrade_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/json"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// signed pushes the target's installer image signed by Ichor's release workflow.
func signed(w *imagetest.World) name.Digest {
	d := w.Push(target)
	w.Attach(d, w.Sign(d, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

	return d
}

// Rule: an installer image whose signature is refused never runs. The
// operation pauses on ichor-verify with a reason that names the refusal and
// what to do, having recorded the digest it judged, and creates no Job.
func TestSelfUpgradeSignatureRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		image func(w *imagetest.World) name.Digest
		want  []string
	}{
		{"unsigned", func(w *imagetest.World) name.Digest { return w.Push(target) },
			[]string{"signature is refused (unsigned)", "is not signed", "--skip-signature-check", "spec.ichor.installerSignature: skip", "For a build nobody signs"}},
		{"tampered", func(w *imagetest.World) name.Digest {
			genuine := signed(w)
			evil := w.Push(target) // the tag moves on to another image, which carries the genuine signature
			w.Attach(evil, w.Sign(genuine, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

			return evil
		}, []string{"signature is refused (tampered)", "does not verify for its digest", "do not run this image"}},
		{"wrong signer", func(w *imagetest.World) name.Digest {
			d := w.Push(target)
			w.Attach(d, w.Sign(d, "https://github.com/someone/fork/.github/workflows/release.yml@refs/tags/v0.2.0", installerimage.GitHubActionsIssuer))

			return d
		}, []string{"signature is refused (wrong signer)", "not signed by Ichor's release workflow", "someone/fork", "Delete this operation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := imagetest.NewWorld(t, true)
			installerAt(t, w, installed)
			d := tc.image(w)

			opName := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
			ichorOp(t, opName)

			op := start(t, w).until(t, opName, "paused", phase(ichorv1alpha1.OperationPaused))

			if op.Status.FailedStep != "ichor-verify" {
				t.Errorf("failed step %q, want ichor-verify (%s)", op.Status.FailedStep, op.Status.FailureReason)
			}

			contains(t, "the failure reason", op.Status.FailureReason, append(tc.want, d.String(), "Nothing was created")...)

			if op.Status.Ichor == nil || op.Status.Ichor.Image != d.String() || op.Status.Ichor.Signature != "" || op.Status.Ichor.Job != "" {
				t.Errorf("status.ichor %+v, want the judged image %s recorded, no signature and no Job", op.Status.Ichor, d)
			}

			if js := jobs(t, opName); len(js) != 0 {
				t.Errorf("a refused image got %d installer Jobs: %s", len(js), js[0].Name)
			}
		})
	}
}

// Rule: spec.ichor.installerSignature: skip runs an unsigned image, and the
// skip is recorded as a Warning Event that names the image and the
// operation and carries no secret (here, the registry credential).
func TestSelfUpgradeSignatureSkipped(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	installerAt(t, w, installed)
	d := w.Push(target)

	const secret = "s3cret-robot-token"
	reg := w.Registry()
	reg.Keychain = authn.NewMultiKeychain(staticKeychain{authn.FromConfig(authn.AuthConfig{Username: "robot", Password: secret})})

	ichorOp(t, "skip", func(u *ichorv1alpha1.IchorUpgrade) { u.InstallerSignature = "skip" })

	p := start(t, w, reg)
	op := p.until(t, "skip", "the installer Job exists", func(op *ichorv1alpha1.TalosOperation) error {
		if n := len(jobs(t, "skip")); n != 1 {
			return fmt.Errorf("%d Jobs; phase %q step %q failure %q", n, op.Status.Phase, op.Status.Step, op.Status.FailureReason)
		}

		return nil
	})

	if op.Status.Ichor.Signature != ichorv1alpha1.SignatureSkipped || op.Status.Ichor.Image != d.String() {
		t.Errorf("status.ichor %+v, want the signature Skipped on %s", op.Status.Ichor, d)
	}

	if img := jobs(t, "skip")[0].Spec.Template.Spec.Containers[0].Image; img != d.String() {
		t.Errorf("the Job runs %q, want %s", img, d)
	}

	var warning string

	testenv.Eventually(t, waitTimeout, "the Warning Event of the skip", func() error {
		for _, e := range events(t, "skip") {
			if strings.HasPrefix(e, "Warning "+ichorv1alpha1.SignatureCheckSkippedReason+": ") {
				warning = e

				return nil
			}
		}

		return fmt.Errorf("events: %v", events(t, "skip"))
	})

	contains(t, "the Warning Event", warning, d.String(), "WITHOUT its signature checked", "default/skip", "spec.ichor.installerSignature: skip")

	status, err := json.Marshal(getOp(t, "skip").Status)
	testenv.Must(t, err)

	for what, s := range map[string]string{"the Events": strings.Join(events(t, "skip"), "\n"), "the status": string(status)} {
		if strings.Contains(s, secret) {
			t.Errorf("%s carry the registry credential: %s", what, s)
		}
	}
}

// Rule: the signed image runs as repository@digest in exactly one Job,
// whatever restarts of the controller happen between the steps; the
// operation completes once the Job completed and the installer recorded the
// target in the IchorInstallation.
func TestSelfUpgradeRunsTheSignedImageOnceAcrossRestarts(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	installerAt(t, w, installed)
	d := signed(w)

	ichorOp(t, "signed")

	// Every reconcile in a new controller process, until the Job exists,
	// then three more restarts with the Job running.
	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, waitTimeout, "the installer Job exists", func() error {
		start(t, w).stopAfter(t, "signed")
		op = getOp(t, "signed")

		if n := len(jobs(t, "signed")); n != 1 {
			return fmt.Errorf("%d Jobs; phase %q step %q failure %q", n, op.Status.Phase, op.Status.Step, op.Status.FailureReason)
		}

		return nil
	})

	for range 3 {
		start(t, w).stopAfter(t, "signed")
	}

	js := jobs(t, "signed")
	if len(js) != 1 {
		t.Fatalf("%d installer Jobs after the restarts, want exactly 1", len(js))
	}

	op = getOp(t, "signed")
	job := js[0]
	img := job.Spec.Template.Spec.Containers[0].Image

	if img != d.String() || !strings.Contains(img, "@sha256:") || strings.Contains(img, ":"+target) {
		t.Errorf("the Job runs %q, want %s by digest, never by tag", img, d)
	}

	if op.Status.Ichor.Job != job.Name || op.Status.Ichor.Signature != ichorv1alpha1.SignatureVerified ||
		!strings.Contains(op.Status.Ichor.Signer, imagetest.ReleaseSubject) || op.Status.From != installed || op.Status.To != target {
		t.Errorf("status %+v / ichor %+v", op.Status, op.Status.Ichor)
	}

	if job.Spec.Template.Spec.ServiceAccountName != "ichor-installer" || job.Namespace != "ichor-system" {
		t.Errorf("the Job %s/%s runs as %q", job.Namespace, job.Name, job.Spec.Template.Spec.ServiceAccountName)
	}

	// The Job ends as the installer ends it: the IchorInstallation records
	// the target, then the Job completes.
	installerAt(t, w, target)
	finishJob(t, job.Name, true)

	op = start(t, w).until(t, "signed", "succeeded", phase(ichorv1alpha1.OperationSucceeded))
	contains(t, "Ready", readyMessage(op), "Ichor "+target+" runs", d.String(), job.Name)

	if n := len(jobs(t, "signed")); n != 1 {
		t.Errorf("%d installer Jobs at the end, want 1", n)
	}
}

// Rule: a failed installer Job pauses the operation on ichor-install with
// what the Job says; a resume runs a new Job (the old one stays for its log).
func TestSelfUpgradeFailedJobPausesAndResumeRunsANewOne(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	installerAt(t, w, installed)
	signed(w)

	ichorOp(t, "fails")

	p := start(t, w)
	p.until(t, "fails", "the installer Job exists", func(op *ichorv1alpha1.TalosOperation) error {
		if n := len(jobs(t, "fails")); n != 1 {
			return fmt.Errorf("%d Jobs; phase %q step %q", n, op.Status.Phase, op.Status.Step)
		}

		return nil
	})

	first := jobs(t, "fails")[0].Name
	finishJob(t, first, false)

	op := p.until(t, "fails", "paused", phase(ichorv1alpha1.OperationPaused))
	if op.Status.FailedStep != "ichor-install" {
		t.Errorf("failed step %q", op.Status.FailedStep)
	}

	contains(t, "the failure reason", op.Status.FailureReason, first, "failed (BackoffLimitExceeded", "rolls back", "kubectl -n ichor-system logs job/"+first, "ichor operation resume fails")

	updateOp(t, "fails", func(op *ichorv1alpha1.TalosOperation) {
		op.Annotations = map[string]string{ichorv1alpha1.ResumeAnnotation: "1"}
	})

	p.until(t, "fails", "a second Job", func(op *ichorv1alpha1.TalosOperation) error {
		if n := len(jobs(t, "fails")); n != 2 {
			return fmt.Errorf("%d Jobs; phase %q step %q", n, op.Status.Phase, op.Status.Step)
		}

		return nil
	})

	if op := getOp(t, "fails"); op.Status.Phase != ichorv1alpha1.OperationRunning || op.Status.Ichor.Job == first {
		t.Errorf("after the resume: phase %q, Job %q (the first was %s)", op.Status.Phase, op.Status.Ichor.Job, first)
	}
}

// staticKeychain answers every registry with one credential.
type staticKeychain struct{ a authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.a, nil }

func readyMessage(op *ichorv1alpha1.TalosOperation) string {
	for _, c := range op.Status.Conditions {
		if c.Type == ichorv1alpha1.ReadyCondition {
			return c.Message
		}
	}

	return ""
}
