package initflow

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows init's steps: on a terminal the current step with a spinner
// and its latest detail on one rewritten line, done steps kept above it; in a
// pipe or a log one line per change, so nothing is repeated.
type Progress struct {
	w   io.Writer
	tty bool

	mu     sync.Mutex
	step   string
	detail string
	frame  int
	start  time.Time
	stop   chan struct{}
	done   chan struct{}
}

// NewProgress returns a printer on w; tty says whether w is a terminal.
func NewProgress(w io.Writer, tty bool) *Progress {
	return &Progress{w: w, tty: tty}
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Step ends the current step as done and starts the next.
func (p *Progress) Step(title string) {
	p.finish("✓")
	p.mu.Lock()
	defer p.mu.Unlock()

	p.step, p.detail, p.start = title, "", time.Now()

	if !p.tty {
		_, _ = fmt.Fprintf(p.w, "==> %s\n", title)

		return
	}

	p.stop, p.done = make(chan struct{}), make(chan struct{})
	p.drawLocked()

	go p.spin(p.stop, p.done)
}

func (p *Progress) spin(stop, done chan struct{}) {
	defer close(done)

	t := time.NewTicker(120 * time.Millisecond)
	defer t.Stop()

	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.frame++
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

func (p *Progress) drawLocked() {
	line := fmt.Sprintf("%s %s", spinner[p.frame%len(spinner)], p.step)
	if p.detail != "" {
		line += ": " + p.detail
	}

	_, _ = fmt.Fprintf(p.w, "\r\033[K%s", line)
}

// Detailf says what the current step is at; a detail equal to the last one
// prints nothing.
func (p *Progress) Detailf(format string, args ...any) {
	d := strings.TrimSpace(fmt.Sprintf(format, args...))

	p.mu.Lock()
	defer p.mu.Unlock()

	if d == p.detail {
		return
	}

	p.detail = d

	if !p.tty {
		_, _ = fmt.Fprintf(p.w, "    %s\n", d)

		return
	}

	p.drawLocked()
}

// Notef prints a line that stays (a warning, a hint) without ending the step.
func (p *Progress) Notef(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()

	msg := fmt.Sprintf(format, args...)
	if p.tty {
		_, _ = fmt.Fprintf(p.w, "\r\033[K%s\n", msg)

		if p.step != "" && p.stop != nil {
			p.drawLocked()
		}

		return
	}

	_, _ = fmt.Fprintln(p.w, msg)
}

// Done ends the current step as done.
func (p *Progress) Done() { p.finish("✓") }

// Fail ends the current step as failed.
func (p *Progress) Fail() { p.finish("✗") }

func (p *Progress) finish(mark string) {
	p.mu.Lock()
	stop, done, step := p.stop, p.done, p.step
	p.stop, p.done = nil, nil
	p.mu.Unlock()

	if step == "" {
		return
	}

	if stop != nil {
		close(stop)
		<-done
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	took := time.Since(p.start).Round(100 * time.Millisecond)

	if p.tty {
		_, _ = fmt.Fprintf(p.w, "\r\033[K%s %s (%s)\n", mark, p.step, took)
	} else if mark != "✓" {
		_, _ = fmt.Fprintf(p.w, "    failed after %s\n", took)
	}

	p.step, p.detail = "", ""
}
