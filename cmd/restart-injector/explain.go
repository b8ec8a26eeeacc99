package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/manifests"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"sigs.k8s.io/yaml"
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
	output := fl.StringP("output", "o", "", "`FORMAT`: json or yaml (an ExplanationList of every object), or the tables (default)")
	if code, ok := parseFlags(fl, "explain", args, explainUsage, stderr); !ok {
		return code
	}
	if fl.NArg() > 0 || len(files) == 0 {
		fmt.Fprintln(stderr, "restart-injector explain: want -f FILE|DIR|-")
		return exitUsage
	}
	if *output != "" && *output != "json" && *output != "yaml" {
		fmt.Fprintf(stderr, "restart-injector explain: -o %q: want json or yaml, or no -o for the tables\n", *output)
		return exitUsage
	}
	list := explanationList{APIVersion: explanationAPIVersion, Kind: "ExplanationList", Items: []explainedObject{}}
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
			if *output != "" {
				list.Items = append(list.Items, explained(o))
				continue
			}
			if !first {
				fmt.Fprintln(stdout)
			}
			first = false
			writeExplanation(stdout, o)
		}
	}
	if *output != "" {
		var b []byte
		if *output == "json" {
			b, err = json.MarshalIndent(list, "", "  ")
			b = append(b, '\n')
		} else {
			b, err = yaml.Marshal(list)
		}
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector explain: %v\n", err)
			return exitFailure
		}
		stdout.Write(b)
		return exitOK
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

// explanationAPIVersion names the shape of explain -o json|yaml; no API
// server serves it, it only gives the output an object's shape for jq and
// yq, as status's ContainerRestarts.
const explanationAPIVersion = "restart-supervisor.dev/v1alpha1"

// explanationList is explain -o json|yaml: every object's explanation.
type explanationList struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []explainedObject `json:"items"`
}

// explainedObject is one pod template's table, field for column.
type explainedObject struct {
	Object               string               `json:"object"`
	PodRestartPolicy     string               `json:"podRestartPolicy"`
	PodRestartPolicyFrom string               `json:"podRestartPolicyFrom,omitempty"`
	Containers           []explainedContainer `json:"containers"`
	Warnings             []string             `json:"warnings,omitempty"`
}

type explainedContainer struct {
	Name     string             `json:"name"`
	Kind     string             `json:"kind"`
	RerunOf  string             `json:"rerunOf,omitempty"`
	Wrapped  bool               `json:"wrapped"`
	Outcomes []explainedOutcome `json:"outcomes"`
	Limits   []string           `json:"limits,omitempty"`
	Backoff  string             `json:"backoff,omitempty"`
}

type explainedOutcome struct {
	ExitCodes  string `json:"exitCodes"`
	DecidedBy  string `json:"decidedBy"`
	Supervised string `json:"withRestartSupervisor"`
	Native     string `json:"nativeKEP5307"`
	Difference string `json:"difference,omitempty"`
}

func explained(o injector.ObjectPlan) explainedObject {
	e := explainedObject{Object: o.Object, PodRestartPolicy: o.PodPolicy, PodRestartPolicyFrom: o.PodPolicyFrom, Warnings: o.Warnings}
	for _, c := range o.Containers {
		ec := explainedContainer{Name: c.Name, Kind: string(c.Kind), RerunOf: c.RerunOf, Wrapped: c.Wrapped, Limits: c.Limits, Backoff: c.Backoff}
		for _, out := range c.Outcomes {
			ec.Outcomes = append(ec.Outcomes, explainedOutcome{ExitCodes: out.Codes, DecidedBy: out.Why, Supervised: out.Supervised, Native: out.Native, Difference: out.Difference})
		}
		e.Containers = append(e.Containers, ec)
	}
	return e
}
