package ui

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// commitsPerPage is how many commits one page of the list shows.
const commitsPerPage = 50

type commitsPage struct {
	Commits    []commitSummary
	Page       int
	Prev, Next string // links to the neighbouring pages
	Total      int
}

func (h *handler) commits(r *http.Request, v *view) (string, error) {
	page, err := pageOf(r)
	if err != nil {
		return "", err
	}
	p := commitsPage{Page: page}
	err = h.srv.Store().View(func(tx store.Tx) error {
		v.RV = tx.ResourceVersion()
		refs, err := commitRefs(tx)
		if err != nil {
			return err
		}
		p.Total = len(refs)
		start := (page - 1) * commitsPerPage
		if start >= len(refs) && page > 1 {
			return notFound("There is no page %d of the commits: there are %d commits, %d to a page.", page, len(refs), commitsPerPage)
		}
		p.Commits, err = h.cache.summaries(tx, refs[start:min(start+commitsPerPage, len(refs))])
		if page > 1 {
			p.Prev = "/commits?page=" + strconv.Itoa(page-1)
		}
		if start+commitsPerPage < len(refs) {
			p.Next = "/commits?page=" + strconv.Itoa(page+1)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Body = "Commits", "commits", p
	v.Watch = []string{"/api/v1/commits/events"}
	return "commits", nil
}

type commitPage struct {
	C        schema.Commit
	Problems []problemRow
	// Other is the preview of the same revision, or for a preview the
	// applied commit, when the server has one.
	Other string
	// Forge links the commit on the forge, where the repository allows.
	Forge string
}

// problemRow is a validation problem and, where the forge allows, the
// link to its file and line at the commit.
type problemRow struct {
	schema.Problem
	Link string
}

func (h *handler) commit(r *http.Request, v *view) (string, error) {
	name := r.PathValue("commit")
	var p commitPage
	err := h.srv.Store().View(func(tx store.Tx) error {
		v.RV = tx.ResourceVersion()
		key, err := commitKey(tx, name)
		if err != nil {
			return err
		}
		if err := tx.GetObject(schema.KindCommit, key, &p.C); err != nil {
			return err
		}
		other := schema.PreviewCommitName(p.C.Spec.SHA)
		if p.C.Spec.Preview {
			other = schema.CommitName(p.C.Spec.SHA)
		}
		if _, err := tx.Get(schema.KindCommit, other); err == nil {
			p.Other = other
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	p.Forge = h.forge.commitLink(p.C.Spec.SHA)
	for _, pr := range p.C.Status.Problems {
		p.Problems = append(p.Problems, problemRow{Problem: pr, Link: h.forge.fileLink(p.C.Spec.SHA, pr.File, pr.Line)})
	}
	v.Title, v.Nav, v.Body = "Commit "+shortSHA(p.C.Spec.SHA), "commits", p
	v.Watch = []string{"/api/v1/commits/events"}
	return "commit", nil
}

// commitKey finds the commit named name, or the only one whose name
// starts with it (at least 7 characters), as the API does.
func commitKey(tx store.Tx, name string) (string, error) {
	key := schema.CommitName(name)
	if _, err := tx.Get(schema.KindCommit, key); err == nil {
		return key, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	var matches []string
	if len(key) >= 7 {
		err := tx.Scan(schema.KindCommit, key, func(r store.Resource) error {
			matches = append(matches, r.Name)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	if len(matches) != 1 {
		return "", notFound("There is no commit %q. The commits page lists them.", name)
	}
	return matches[0], nil
}

func shortSHA(sha string) string {
	sha = strings.TrimPrefix(sha, "sha256:")
	return sha[:min(len(sha), 12)]
}

func itoa(n int) string { return strconv.Itoa(n) }

// pageOf reads a list's ?page=N, 1 by default.
func pageOf(r *http.Request) (int, error) {
	s := r.URL.Query().Get("page")
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, notFound("There is no page %q: pages are numbered from 1.", s)
	}
	return n, nil
}
