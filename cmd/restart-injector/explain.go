package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/manifests"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

const explainUsage = `usage: restart-injector explain -f FILE|DIR|- [-f ...]

For every container of every Pod and workload template, prints which exit
codes (0-255) restart it in place, which are handed to the kubelet and what
the kubelet then does under the pod's restartPolicy, which are held, and how
each differs from a cluster where the kubelet implements the rules natively.
In a pod that restarts all containers it also lists the re-run sidecar the
injection adds after each init container, and warns of those it leaves out.
`

func runExplain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := newFlagSet("explain")
	var files fileList
	fl.VarP(&files, "filename", "f", "manifest file, directory (read recursively) or - for stdin; repeatable")
	var kubeVersion rules.KubeVersion
	fl.Var(&kubeVersion, "kubernetes-version", kubeVersionUsage)
	if code, ok := parseFlags(fl, "explain", args, explainUsage, stderr); !ok {
		return code
	}
	if fl.NArg() > 0 || len(files) == 0 {
		fmt.Fprintln(stderr, "restart-injector explain: want -f FILE|DIR|-")
		return exitUsage
	}
	inputs, err := readInputs(files, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector explain: %v\n", err)
		return exitFailure
	}
	first := true
	for _, in := range inputs {
		m, err := manifests.ReadManifests(in.data)
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector explain: %s: %v\n", in.name, err)
			return exitFailure
		}
		objs, err := manifests.ExplainManifests(m, kubeVersion)
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector explain: %s: %v\n", in.name, err)
			return exitFailure
		}
		for _, o := range objs {
			if !first {
				fmt.Fprintln(stdout)
			}
			first = false
			writeExplanation(stdout, o)
		}
	}
	if !first {
		fmt.Fprintln(stdout)
		for _, l := range strings.Split(injector.Legend, "\n") {
			fmt.Fprintln(stdout, l)
		}
	}
	return exitOK
}

func writeExplanation(w io.Writer, o injector.ObjectPlan) {
	if o.PodPolicyFrom != "" {
		// The controller's choice, not the template's: say whose.
		fmt.Fprintf(w, "%s, pod restartPolicy %s (%s)\n", o.Object, o.PodPolicy, o.PodPolicyFrom)
	} else {
		fmt.Fprintf(w, "%s, pod restartPolicy %s\n", o.Object, o.PodPolicy)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tEXIT CODES\tDECIDED BY\tWITH restart-supervisor\tNATIVE KEP-5307\tDIFFERENCE")
	for _, c := range o.Containers {
		name := c.Name
		switch c.Kind {
		case injector.KindRegular:
		case injector.KindRerun:
			name += " (re-run of " + c.RerunOf + ")"
		default:
			name += " (" + string(c.Kind) + ")"
		}
		for _, out := range c.Outcomes {
			diff := out.Difference
			if diff == "" {
				diff = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, out.Codes, out.Why, out.Supervised, out.Native, diff)
			name = ""
		}
	}
	tw.Flush()
	for _, c := range o.Containers {
		if c.Backoff != "" {
			fmt.Fprintf(w, "%s: %s\n", c.Name, c.Backoff)
		}
		for _, l := range c.Limits {
			fmt.Fprintf(w, "%s: %s\n", c.Name, l)
		}
	}
	for _, warning := range o.Warnings {
		fmt.Fprintln(w, "warning:", warning)
	}
}
