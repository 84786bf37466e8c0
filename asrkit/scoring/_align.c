/* The weighted edit-distance alignment of asrkit.scoring.align, compiled.
 *
 * align(ref, hyp, sub, ins, dele, want_ops) -> (corr, sub, dele, ins, ops | None)
 *
 * ref and hyp are two str (aligned character by character) or two sequences of hashable
 * tokens (words). The dynamic programme and the traceback are those of the Python
 * reference implementation in align.py, step for step: the same costs, and on ties the
 * diagonal, then an insertion, then a deletion, walking back from the end. So the result
 * is identical to it (tests/test_scoring.py checks this on random sequences), and the
 * Python code stays the specification.
 *
 * Tokens are first numbered (code points for str; a dict of the utterance's tokens
 * otherwise), so the inner loop compares ints.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

/* Number the tokens of a sequence; equal tokens get equal ids. Returns 0 on error. */
static int number_tokens(PyObject *seq, Py_ssize_t n, PyObject *ids, long *out) {
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *id = PyDict_GetItemWithError(ids, items[k]);
        if (id == NULL) {
            if (PyErr_Occurred()) return 0;
            id = PyLong_FromSsize_t(PyDict_GET_SIZE(ids));
            if (id == NULL || PyDict_SetItem(ids, items[k], id) < 0) {
                Py_XDECREF(id);
                return 0;
            }
            Py_DECREF(id);
        }
        out[k] = PyLong_AsLong(id);
    }
    return 1;
}

static int code_points(PyObject *text, Py_ssize_t n, long *out) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t k = 0; k < n; k++) out[k] = (long)PyUnicode_READ(kind, data, k);
    return 1;
}

/* The op tuple ("C"|"S"|"I"|"D", ref token or None, hyp token or None). */
static PyObject *op_tuple(const char *op, PyObject *ref, PyObject *hyp) {
    return Py_BuildValue("(sOO)", op, ref ? ref : Py_None, hyp ? hyp : Py_None);
}

static PyObject *item_of(PyObject *seq, int is_text, Py_ssize_t k) {
    /* A new reference: the k-th character of a str, or the k-th item of a fast sequence. */
    if (is_text) return PySequence_GetItem(seq, k);
    PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
    Py_INCREF(item);
    return item;
}

/* Counts only (no ops): the same costs and tie-breaking, two rows at a time. The traceback
 * from a cell depends only on the costs around it, so the path it takes from (i, j) is the
 * path from its predecessor plus one step, and each cell can carry the substitution and
 * deletion counts of that path forward. */
static void count_only(const long *ref_ids, Py_ssize_t n, const long *hyp_ids, Py_ssize_t m,
                       long w_sub, long w_ins, long w_del, long *work, long out[4]) {
    long *prev = work, *row = work + (m + 1), *ps = work + 2 * (m + 1), *rs = work + 3 * (m + 1);
    long *pd = work + 4 * (m + 1), *rd = work + 5 * (m + 1), *swap;
    for (Py_ssize_t j = 0; j <= m; j++) { prev[j] = j * w_ins; ps[j] = 0; pd[j] = 0; }
    for (Py_ssize_t i = 1; i <= n; i++) {
        row[0] = i * w_del; rs[0] = 0; rd[0] = i;
        long r = ref_ids[i - 1];
        for (Py_ssize_t j = 1; j <= m; j++) {
            int same = r == hyp_ids[j - 1];
            long diag = prev[j - 1] + (same ? 0 : w_sub);
            long up = prev[j] + w_del;
            long left = row[j - 1] + w_ins;
            long best = diag < up ? diag : up;
            best = best < left ? best : left;
            row[j] = best;
            if (best == diag) { rs[j] = ps[j - 1] + !same; rd[j] = pd[j - 1]; }
            else if (best == left) { rs[j] = rs[j - 1]; rd[j] = rd[j - 1]; }
            else { rs[j] = ps[j]; rd[j] = pd[j] + 1; }
        }
        swap = prev; prev = row; row = swap;
        swap = ps; ps = rs; rs = swap;
        swap = pd; pd = rd; rd = swap;
    }
    long subs = ps[m], dels = pd[m], corr = n - subs - dels;
    out[0] = corr; out[1] = subs; out[2] = dels; out[3] = m - corr - subs;
}

/* Row i of the cost matrix from row i - 1 (the programme of align.py). */
static void fill_row(const long *prev, long *row, Py_ssize_t i, long r, const long *hyp_ids, Py_ssize_t m,
                     long w_sub, long w_ins, long w_del) {
    row[0] = i * w_del;
    for (Py_ssize_t j = 1; j <= m; j++) {
        long diag = prev[j - 1] + (r == hyp_ids[j - 1] ? 0 : w_sub);
        long up = prev[j] + w_del;
        long left = row[j - 1] + w_ins;
        long best = diag < up ? diag : up;
        row[j] = best < left ? best : left;
    }
}

/* Rows of work space for the traceback of n reference tokens: every k-th row kept, plus a
 * block of k + 1 rows (which also holds the forward pass's two rows). */
static Py_ssize_t ops_work(Py_ssize_t n) {
    Py_ssize_t k = 1;
    while ((k + 1) * (k + 1) <= n) k++;
    return (n / k + 1) + (k + 1 > 2 ? k + 1 : 2);
}

static PyObject *align(PyObject *self, PyObject *args) {
    PyObject *ref_in, *hyp_in;
    long w_sub, w_ins, w_del;
    int want_ops;
    if (!PyArg_ParseTuple(args, "OOlllp", &ref_in, &hyp_in, &w_sub, &w_ins, &w_del, &want_ops))
        return NULL;
    int is_text = PyUnicode_Check(ref_in) && PyUnicode_Check(hyp_in);
    PyObject *ref = NULL, *hyp = NULL, *ids = NULL, *ops = NULL, *result = NULL;
    long *ref_ids = NULL, *hyp_ids = NULL, *cost = NULL;
    Py_ssize_t n, m;
    if (is_text) {
        ref = ref_in; hyp = hyp_in;
        Py_INCREF(ref); Py_INCREF(hyp);
        n = PyUnicode_GET_LENGTH(ref); m = PyUnicode_GET_LENGTH(hyp);
    } else {
        ref = PySequence_Fast(ref_in, "ref must be a sequence of tokens");
        hyp = ref ? PySequence_Fast(hyp_in, "hyp must be a sequence of tokens") : NULL;
        if (hyp == NULL) goto done;
        n = PySequence_Fast_GET_SIZE(ref); m = PySequence_Fast_GET_SIZE(hyp);
    }
    ref_ids = malloc(sizeof(long) * (n + 1));
    hyp_ids = malloc(sizeof(long) * (m + 1));
    cost = malloc(sizeof(long) * (want_ops ? ops_work(n) * (m + 1) : 6 * (m + 1)));
    if (!ref_ids || !hyp_ids || !cost) { PyErr_NoMemory(); goto done; }
    if (is_text) {
        code_points(ref, n, ref_ids);
        code_points(hyp, m, hyp_ids);
    } else {
        ids = PyDict_New();
        if (!ids || !number_tokens(ref, n, ids, ref_ids) || !number_tokens(hyp, m, ids, hyp_ids))
            goto done;
    }
    if (!want_ops) {
        long counts[4];
        count_only(ref_ids, n, hyp_ids, m, w_sub, w_ins, w_del, cost, counts);
        result = Py_BuildValue("(llllO)", counts[0], counts[1], counts[2], counts[3], Py_None);
        goto done;
    }
    /* The costs of every k-th row are kept (k about sqrt(n)); the traceback recomputes the
     * k rows of one block at a time from the block's first row. The costs, and so the
     * path, are those of the full matrix, in O(m sqrt(n)) memory instead of O(n m): a
     * 10,000-word line takes about 16 MB, not 800 MB. */
    Py_ssize_t k = 1;
    while ((k + 1) * (k + 1) <= n) k++;
    Py_ssize_t width = m + 1, kept = n / k + 1;
    long *saved = cost, *block = cost + kept * width;
    long *prev_row = block, *this_row = block + width;  /* the forward pass's two rows */
    for (Py_ssize_t j = 0; j <= m; j++) prev_row[j] = j * w_ins;
    memcpy(saved, prev_row, sizeof(long) * width);
    for (Py_ssize_t i = 1; i <= n; i++) {
        fill_row(prev_row, this_row, i, ref_ids[i - 1], hyp_ids, m, w_sub, w_ins, w_del);
        if (i % k == 0) memcpy(saved + (i / k) * width, this_row, sizeof(long) * width);
        long *swap = prev_row; prev_row = this_row; this_row = swap;
    }
    long corr = 0, subs = 0, dels = 0, inss = 0;
    if (!(ops = PyList_New(0))) goto done;
    Py_ssize_t i = n, j = m, base = -1;
#define COST(r, c) block[((r) - base) * width + (c)]
    while (i > 0 || j > 0) {
        if (i > 0 && (base < 0 || i == base)) {
            /* Rows base .. i of the block that ends at row i. */
            base = ((i - 1) / k) * k;
            memcpy(block, saved + (base / k) * width, sizeof(long) * width);
            for (Py_ssize_t r = base + 1; r <= i; r++)
                fill_row(block + (r - base - 1) * width, block + (r - base) * width, r, ref_ids[r - 1],
                         hyp_ids, m, w_sub, w_ins, w_del);
        }
        const char *op;
        Py_ssize_t ri = -1, hj = -1;
        if (i == 0) {  /* the first row: insertions only */
            op = "I"; inss++;
            hj = --j;
        } else {
            long here = COST(i, j);
            if (j > 0 && here == COST(i - 1, j - 1) + (ref_ids[i - 1] == hyp_ids[j - 1] ? 0 : w_sub)) {
                int same = ref_ids[i - 1] == hyp_ids[j - 1];
                op = same ? "C" : "S";
                if (same) corr++; else subs++;
                ri = --i; hj = --j;
            } else if (j > 0 && here == COST(i, j - 1) + w_ins) {
                op = "I"; inss++;
                hj = --j;
            } else {
                op = "D"; dels++;
                ri = --i;
            }
        }
        PyObject *r_item = ri >= 0 ? item_of(ref, is_text, ri) : NULL;
        PyObject *h_item = hj >= 0 ? item_of(hyp, is_text, hj) : NULL;
        PyObject *t = (ri >= 0 && !r_item) || (hj >= 0 && !h_item) ? NULL : op_tuple(op, r_item, h_item);
        Py_XDECREF(r_item);
        Py_XDECREF(h_item);
        if (!t || PyList_Append(ops, t) < 0) { Py_XDECREF(t); goto done; }
        Py_DECREF(t);
    }
#undef COST
    if (PyList_Reverse(ops) < 0) goto done;
    result = Py_BuildValue("(llllO)", corr, subs, dels, inss, ops);
done:
    free(ref_ids); free(hyp_ids); free(cost);
    Py_XDECREF(ref); Py_XDECREF(hyp); Py_XDECREF(ids); Py_XDECREF(ops);
    return result;
}

static PyMethodDef methods[] = {
    {"align", align, METH_VARARGS,
     "align(ref, hyp, sub, ins, dele, want_ops) -> (corr, sub, dele, ins, ops or None)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_align",
                                    "Compiled weighted edit-distance alignment.", -1, methods};

PyMODINIT_FUNC PyInit__align(void) { return PyModule_Create(&module); }
