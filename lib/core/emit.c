#include "core/emit.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Room for "%.17f" of the largest double (309 integer digits). */
#define NUMBUF 384

int xfmt_parse(const char *s, enum xfmt *out)
{
	static const char *const names[] = { [XFMT_TEXT] = "text", [XFMT_YAML] = "yaml",
					     [XFMT_JSON] = "json" };

	for (int i = 0; s && i < 3; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (enum xfmt)i;
			return 0;
		}
	}
	return -1;
}

static bool is_container(const struct xnode *n)
{
	return xnode_type(n) == XN_MAP || xnode_type(n) == XN_LIST;
}

/* Non-string scalars as text; NULL for strings and containers. */
static const char *scalar_text(const struct xnode *n, enum xfmt fmt, char *buf)
{
	int prec;
	double d;

	switch (xnode_type(n)) {
	case XN_NULL:
		return fmt == XFMT_TEXT ? "-" : "null";
	case XN_U64:
		snprintf(buf, NUMBUF, "%" PRIu64, xnode_u64(n));
		return buf;
	case XN_I64:
		snprintf(buf, NUMBUF, "%" PRId64, xnode_i64(n));
		return buf;
	case XN_BOOL:
		if (fmt == XFMT_TEXT)
			return xnode_bool(n) ? "yes" : "no";
		return xnode_bool(n) ? "true" : "false";
	case XN_F64:
		d = xnode_f64(n, &prec);
		if (isfinite(d)) {
			snprintf(buf, NUMBUF, "%.*f", prec, d);
			return buf;
		}
		if (fmt == XFMT_JSON)
			return "null";
		if (isnan(d))
			return fmt == XFMT_YAML ? ".nan" : "nan";
		if (d > 0)
			return fmt == XFMT_YAML ? ".inf" : "inf";
		return fmt == XFMT_YAML ? "-.inf" : "-inf";
	default:
		return NULL;
	}
}

/* ---- text ---- */

/* Writes s (when f is non-NULL) with control characters replaced, so that
 * peer-supplied names cannot move the cursor; returns the display width,
 * counting UTF-8 sequences as one column. */
static size_t put_text(FILE *f, const char *s, bool upper)
{
	size_t w = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f)
			c = '?';
		else if (upper)
			c = (unsigned char)toupper(c);
		if ((c & 0xc0) != 0x80)
			w++;
		if (f)
			fputc(c, f);
	}
	return w;
}

static void pad(FILE *f, size_t n)
{
	while (n--)
		fputc(' ', f);
}

/* One value on one line: scalars, "-" for empty containers, and a short
 * summary for nested ones inside table cells. */
static size_t put_value(FILE *f, const struct xnode *n)
{
	char buf[NUMBUF];
	const char *s;
	size_t w = 0;

	if (xnode_type(n) == XN_STR)
		return xnode_str(n)[0] ? put_text(f, xnode_str(n), false) : put_text(f, "\"\"", false);
	if (xnode_len(n) == 0 && is_container(n))
		return put_text(f, "-", false);
	if (xnode_type(n) == XN_MAP)
		return put_text(f, "...", false);
	if (xnode_type(n) == XN_LIST) {
		for (size_t i = 0; i < xnode_len(n); i++) {
			const struct xnode *c = xnode_at(n, i, NULL);

			if (i)
				w += put_text(f, ",", false);
			w += is_container(c) ? put_text(f, "...", false) : put_value(f, c);
		}
		return w;
	}
	s = scalar_text(n, XFMT_TEXT, buf);
	return put_text(f, s, false);
}

static bool is_inline(const struct xnode *n)
{
	return !is_container(n) || xnode_len(n) == 0;
}

static int text_node(FILE *f, const struct xnode *n, size_t ind);

static int text_map(FILE *f, const struct xnode *m, size_t ind)
{
	size_t w = 0;
	const char *key;

	for (size_t i = 0; i < xnode_len(m); i++) {
		const struct xnode *c = xnode_at(m, i, &key);
		size_t kw = put_text(NULL, key, false);

		if (is_inline(c) && kw > w)
			w = kw;
	}
	for (size_t i = 0; i < xnode_len(m); i++) {
		const struct xnode *c = xnode_at(m, i, &key);
		size_t kw;
		int r;

		pad(f, ind);
		kw = put_text(f, key, false);
		if (is_inline(c)) {
			pad(f, w + 2 - kw);
			put_value(f, c);
			fputc('\n', f);
			continue;
		}
		fputs(":\n", f);
		if ((r = text_node(f, c, ind + 2)) < 0)
			return r;
	}
	return 0;
}

/* Columns come from the first row, as ps and ip do; a row without a column
 * shows "-", keys only later rows have are not shown. */
static int text_table(FILE *f, const struct xnode *l, size_t ind)
{
	const struct xnode *first = xnode_at(l, 0, NULL);
	size_t ncol = xnode_len(first), nrow = xnode_len(l);
	size_t *w = calloc(ncol, sizeof(*w));
	const char *key;

	if (!w)
		return -ENOMEM;
	for (size_t c = 0; c < ncol; c++) {
		xnode_at(first, c, &key);
		w[c] = put_text(NULL, key, true);
		for (size_t r = 0; r < nrow; r++) {
			const struct xnode *v = xnode_get(xnode_at(l, r, NULL), key);
			size_t vw = v ? put_value(NULL, v) : 1;

			if (vw > w[c])
				w[c] = vw;
		}
	}
	for (size_t r = 0; r <= nrow; r++) {
		const struct xnode *row = r ? xnode_at(l, r - 1, NULL) : NULL;

		pad(f, ind);
		for (size_t c = 0; c < ncol; c++) {
			const struct xnode *v;
			size_t vw;

			xnode_at(first, c, &key);
			if (r == 0)
				vw = put_text(f, key, true);
			else if ((v = xnode_get(row, key)))
				vw = put_value(f, v);
			else
				vw = put_text(f, "-", false);
			if (c + 1 < ncol)
				pad(f, w[c] - vw + 2);
		}
		fputc('\n', f);
	}
	free(w);
	return 0;
}

static int text_list(FILE *f, const struct xnode *l, size_t ind)
{
	int r;

	if (xnode_type(xnode_at(l, 0, NULL)) == XN_MAP && xnode_len(xnode_at(l, 0, NULL)) > 0)
		return text_table(f, l, ind);
	for (size_t i = 0; i < xnode_len(l); i++) {
		const struct xnode *c = xnode_at(l, i, NULL);

		if (!is_inline(c)) {
			if ((r = text_node(f, c, xnode_type(c) == XN_LIST ? ind + 2 : ind)) < 0)
				return r;
			continue;
		}
		pad(f, ind);
		put_value(f, c);
		fputc('\n', f);
	}
	return 0;
}

static int text_node(FILE *f, const struct xnode *n, size_t ind)
{
	if (xnode_type(n) == XN_MAP)
		return text_map(f, n, ind);
	if (xnode_type(n) == XN_LIST)
		return text_list(f, n, ind);
	pad(f, ind);
	put_value(f, n);
	fputc('\n', f);
	return 0;
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
		} else if (c < 0x20) {
			fprintf(f, "\\u%04x", c);
		} else {
			fputc(c, f);
		}
	}
	fputc('"', f);
}

static void json_node(FILE *f, const struct xnode *n, size_t ind)
{
	bool map = xnode_type(n) == XN_MAP;
	char buf[NUMBUF];
	const char *key;

	if (xnode_type(n) == XN_STR) {
		json_str(f, xnode_str(n));
		return;
	}
	if (!is_container(n)) {
		fputs(scalar_text(n, XFMT_JSON, buf), f);
		return;
	}
	if (xnode_len(n) == 0) {
		fputs(map ? "{}" : "[]", f);
		return;
	}
	fputs(map ? "{\n" : "[\n", f);
	for (size_t i = 0; i < xnode_len(n); i++) {
		const struct xnode *c = xnode_at(n, i, &key);

		pad(f, ind + 2);
		if (map) {
			json_str(f, key);
			fputs(": ", f);
		}
		json_node(f, c, ind + 2);
		fputs(i + 1 < xnode_len(n) ? ",\n" : "\n", f);
	}
	pad(f, ind);
	fputc(map ? '}' : ']', f);
}

/* ---- YAML ---- */

/* Plain scalars that a YAML 1.1 or 1.2 reader would resolve to something
 * other than a string (null, booleans, numbers) must be quoted; libyaml only
 * quotes what is syntactically necessary.  Quoting too much is harmless. */
static bool yaml_ambiguous(const char *s)
{
	static const char *const words[] = {
		"~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N",
		"no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF",
	};

	if (!s[0] || isdigit((unsigned char)s[0]))
		return true;
	if (strchr("+-.", s[0]) && s[1] && strchr("0123456789.iInN", s[1]))
		return true;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcmp(s, words[i]) == 0)
			return true;
	return false;
}

static int yaml_fail(yaml_emitter_t *e)
{
	if (e->error == YAML_MEMORY_ERROR)
		return -ENOMEM;
	if (e->error == YAML_WRITER_ERROR)
		return -EIO;
	return -EINVAL;
}

static int yaml_scalar(yaml_emitter_t *e, const char *s, bool typed)
{
	yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
	int plain = 1;
	yaml_event_t ev;

	if (typed) {
		style = YAML_PLAIN_SCALAR_STYLE;
	} else if (yaml_ambiguous(s)) {
		style = YAML_SINGLE_QUOTED_SCALAR_STYLE;
		plain = 0;
	}
	/* Fails only for invalid UTF-8 (or ENOMEM). */
	if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (const yaml_char_t *)s, -1, plain, 1,
					  style))
		return -EILSEQ;
	return yaml_emitter_emit(e, &ev) ? 0 : yaml_fail(e);
}

static int yaml_node(yaml_emitter_t *e, const struct xnode *n)
{
	bool map = xnode_type(n) == XN_MAP;
	char buf[NUMBUF];
	const char *key;
	yaml_event_t ev;
	int r, ok;

	if (xnode_type(n) == XN_STR)
		return yaml_scalar(e, xnode_str(n), false);
	if (!is_container(n))
		return yaml_scalar(e, scalar_text(n, XFMT_YAML, buf), true);
	if (map)
		ok = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
	else
		ok = yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
	if (!ok)
		return -ENOMEM;
	if (!yaml_emitter_emit(e, &ev))
		return yaml_fail(e);
	for (size_t i = 0; i < xnode_len(n); i++) {
		const struct xnode *c = xnode_at(n, i, &key);

		if (map && (r = yaml_scalar(e, key, false)) < 0)
			return r;
		if ((r = yaml_node(e, c)) < 0)
			return r;
	}
	if (map)
		yaml_mapping_end_event_initialize(&ev);
	else
		yaml_sequence_end_event_initialize(&ev);
	return yaml_emitter_emit(e, &ev) ? 0 : yaml_fail(e);
}

static int emit_yaml(FILE *f, const struct xnode *root)
{
	yaml_emitter_t e;
	yaml_event_t ev;
	int r = -ENOMEM;

	if (!yaml_emitter_initialize(&e))
		return -ENOMEM;
	yaml_emitter_set_output_file(&e, f);
	yaml_emitter_set_unicode(&e, 1);
	yaml_emitter_set_width(&e, -1); /* never fold long strings */

	if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING))
		goto out_delete_emitter;
	if (!yaml_emitter_emit(&e, &ev))
		goto out_fail;
	if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1))
		goto out_delete_emitter;
	if (!yaml_emitter_emit(&e, &ev))
		goto out_fail;
	if ((r = yaml_node(&e, root)) < 0)
		goto out_delete_emitter;
	yaml_document_end_event_initialize(&ev, 1);
	if (!yaml_emitter_emit(&e, &ev))
		goto out_fail;
	yaml_stream_end_event_initialize(&ev);
	if (!yaml_emitter_emit(&e, &ev) || !yaml_emitter_flush(&e))
		goto out_fail;
	r = 0;
	goto out_delete_emitter;

out_fail:
	r = yaml_fail(&e);
out_delete_emitter:
	yaml_emitter_delete(&e);
	return r;
}

int xemit_errno;

int xemit(FILE *f, const struct xnode *root, enum xfmt fmt)
{
	int r = 0;

	if (!f || !root)
		return -EINVAL;
	switch (fmt) {
	case XFMT_TEXT:
		r = text_node(f, root, 0);
		break;
	case XFMT_YAML:
		r = emit_yaml(f, root);
		break;
	case XFMT_JSON:
		json_node(f, root, 0);
		fputc('\n', f);
		break;
	default:
		return -EINVAL;
	}
	if (fflush(f) != 0 && r == 0)
		r = errno ? -errno : -EIO;
	if (ferror(f) && r == 0)
		r = -EIO;
	if (r < 0 && r != -EINVAL)
		xemit_errno = -r;
	return r;
}
