/* The gconv side of CORRECTED-UTF-8: glibc's step protocol, nothing else.
 *
 * glibc calls gconv_init once per cached conversion step, gconv for every
 * iconv(3) call (and for flushes), gconv_end when the step is dropped.
 * This file follows iconv/skeleton.c of glibc (which is not installed, so it
 * cannot be included): convert into this step's buffer, hand that to the next
 * step, and when the next step stops early, convert again up to exactly where
 * it stopped so that the input pointer (and so iconv(1)'s "position N") names
 * the character that failed.  The conversion itself is Rust
 * (cutf8_gconv_convert / cutf8_gconv_flush in src/lib.rs), over the cutf8
 * codec.  A sequence cut by the end of the input is reported as incomplete
 * (EINVAL) and is fed again by the caller, which is iconv(3)'s contract.
 * The one thing kept between calls is one int of the descriptor's mbstate_t
 * (__count): the codec's magic number state (how much of the magic number
 * an encoder wrote, units of one a call's input ended with, decided by the
 * next call or written as text by the flush).  Like skeleton.c's
 * SAVE_RESET_STATE, the re-run below starts again from the saved word.
 *
 * Compiled against the system's <gconv.h> so that the structures have the
 * layout of the glibc the module is built for.  The exported symbols gconv,
 * gconv_init and gconv_end are thin Rust wrappers (a cdylib exports only Rust
 * symbols); they call the cutf8_shim_* functions below.
 */

#include <gconv.h>
#include <stdint.h>
#include <string.h>

/* Results of the Rust converter. */
enum { RES_EMPTY = 0, RES_FULL = 1, RES_INCOMPLETE = 2, RES_ILLEGAL = 3, RES_BUG = 5 };

/* Conversion kinds (step->__data), see src/lib.rs. */
enum {
  K_DECODE = 2,
  K_ENCODE = 3,
  K_NOMAGIC = 8,
};

extern int cutf8_gconv_convert (int kind, const unsigned char **in,
                                const unsigned char *inend,
                                unsigned char **out, unsigned char *outend,
                                int *state);
extern int cutf8_gconv_flush (int kind, unsigned char **out,
                              unsigned char *outend, int *state);
/* The exported entry point (src/lib.rs); its address calibrates demangling. */
extern int gconv (struct __gconv_step *, struct __gconv_step_data *,
                  const unsigned char **, const unsigned char *,
                  unsigned char **, size_t *, int, int);

static int
to_gconv_status (int res)
{
  switch (res)
    {
    case RES_EMPTY:
      return __GCONV_EMPTY_INPUT;
    case RES_FULL:
      return __GCONV_FULL_OUTPUT;
    case RES_INCOMPLETE:
      return __GCONV_INCOMPLETE_INPUT;
    case RES_ILLEGAL:
      return __GCONV_ILLEGAL_INPUT;
    default:
      return __GCONV_INTERNAL_ERROR;
    }
}

/* Strip trailing '/' and compare case-sensitively (glibc upper-cases names). */
static int
is_name (const char *name, const char *want)
{
  size_t n = strlen (want);
  if (strncmp (name, want, n) != 0)
    return 0;
  for (name += n; *name != '\0'; ++name)
    if (*name != '/')
      return 0;
  return 1;
}

static int
charset_kind (const char *name)
{
  if (is_name (name, "CORRECTED-UTF-8"))
    return 0;
  if (is_name (name, "CORRECTED-UTF-8-NOMAGIC"))
    return K_NOMAGIC;
  return -1;
}

int
cutf8_shim_init (struct __gconv_step *step)
{
  int from = charset_kind (step->__from_name);
  int to = charset_kind (step->__to_name);
  int kind;
  /* One step each way between a Corrected charset and UTF-8: glibc goes
     through its own UTF-8 <-> INTERNAL step for every other charset. */
  if (from >= 0 && is_name (step->__to_name, "ISO-10646/UTF8"))
    kind = K_DECODE | from;
  else if (to >= 0 && is_name (step->__from_name, "ISO-10646/UTF8"))
    kind = K_ENCODE | to;
  else
    return __GCONV_NOCONV;

  step->__data = (void *) (uintptr_t) kind;
  step->__stateful = 0;
  step->__min_needed_from = 1;
  step->__max_needed_from = 6;
  step->__min_needed_to = 1;
  step->__max_needed_to = 4;
  return __GCONV_OK;
}

void
cutf8_shim_end (struct __gconv_step *step)
{
  (void) step;
}

/* glibc stores the function pointers of steps loaded from modules mangled
 * (PTR_MANGLE: x86-64 xor with the thread's pointer guard, then rotate left
 * by 17; i386 by 9; other ports xor only, or nothing).  The guard is not
 * readable through any public interface, but our own step holds our own
 * entry point mangled with it: undo the rotation, xor out the known address,
 * and the guard is what remains. */
#if defined(__x86_64__)
# define CUTF8_PTR_ROT 17
#elif defined(__i386__)
# define CUTF8_PTR_ROT 9
#else
# define CUTF8_PTR_ROT 0
#endif

static uintptr_t
rotr (uintptr_t v, unsigned n)
{
  const unsigned bits = sizeof (uintptr_t) * 8;
  return n == 0 ? v : (v >> n) | (v << (bits - n));
}

static __gconv_fct
demangle (const struct __gconv_step *self, __gconv_fct mangled)
{
  uintptr_t guard = rotr ((uintptr_t) self->__fct, CUTF8_PTR_ROT) ^ (uintptr_t) &gconv;
  return (__gconv_fct) (rotr ((uintptr_t) mangled, CUTF8_PTR_ROT) ^ guard);
}

int
cutf8_shim_gconv (struct __gconv_step *step, struct __gconv_step_data *data,
                  const unsigned char **inptrp, const unsigned char *inend,
                  unsigned char **outbufstart, size_t *irreversible,
                  int do_flush, int consume_incomplete)
{
  struct __gconv_step *next_step = step + 1;
  struct __gconv_step_data *next_data = data + 1;
  __gconv_fct fct = NULL;
  int kind = (int) (uintptr_t) step->__data;
  int is_last = (data->__flags & __GCONV_IS_LAST) != 0;
  int status;

  if (!is_last)
    {
      fct = next_step->__fct;
      if (next_step->__shlib_handle != NULL)
        fct = demangle (step, fct);
    }

  if (do_flush)
    {
      int *state = &data->__statep->__count;
      /* Units of a magic number held at the end of the input are text
         after all (cutf8 decode converts a text that ends with them):
         write them, through the next steps as skeleton.c's
         EMIT_SHIFT_TO_INIT does.  A reset (do_flush 2) drops them.  An
         encoder that was given no input writes nothing: an empty text is
         an empty file, as with cutf8 encode. */
      if (do_flush == 1)
        {
          unsigned char *outstart = data->__outbuf;
          unsigned char *outbuf = outstart;
          int saved = *state;
          int res = cutf8_gconv_flush (kind, &outbuf, data->__outbufend, state);
          if (is_last)
            data->__outbuf = outbuf;
          if (res != RES_EMPTY)
            return to_gconv_status (res);
          if (!is_last && outbuf > outstart)
            {
              const unsigned char *outerr = outstart;
              int result = fct (next_step, next_data, &outerr, outbuf, NULL,
                                irreversible, 0, consume_incomplete);
              if (result != __GCONV_EMPTY_INPUT)
                {
                  /* Keep held what the next step did not take. */
                  *state = saved;
                  outbuf = outstart;
                  (void) cutf8_gconv_flush (kind, &outbuf,
                                            (unsigned char *) outerr, state);
                  return result;
                }
            }
        }
      memset (data->__statep, '\0', sizeof (*data->__statep));
      if (!is_last)
        return fct (next_step, next_data, NULL, NULL, NULL, irreversible,
                    do_flush, consume_incomplete);
      return __GCONV_OK;
    }

  unsigned char *outbuf = outbufstart == NULL ? data->__outbuf : *outbufstart;
  unsigned char *outend = data->__outbufend;

  while (1)
    {
      const unsigned char *inptr = *inptrp;
      unsigned char *outstart = outbuf;
      int saved = data->__statep->__count;

      status = to_gconv_status (cutf8_gconv_convert (
          kind, inptrp, inend, &outbuf, outend, &data->__statep->__count));

      /* Called from an error handler: do nothing else. */
      if (outbufstart != NULL)
        {
          *outbufstart = outbuf;
          return status;
        }

      ++data->__invocation_counter;

      if (is_last)
        {
          data->__outbuf = outbuf;
          break;
        }

      if (outbuf > outstart)
        {
          const unsigned char *outerr = data->__outbuf;
          int result = fct (next_step, next_data, &outerr, outbuf, NULL,
                            irreversible, 0, consume_incomplete);
          if (result != __GCONV_EMPTY_INPUT)
            {
              if (outerr != outbuf)
                {
                  /* The next step stopped inside what we produced: convert
                     again, up to exactly that point, so *inptrp lands on the
                     first character it did not take. */
                  *inptrp = inptr;
                  outbuf = outstart;
                  data->__statep->__count = saved;
                  int again = cutf8_gconv_convert (
                      kind, inptrp, inend, &outbuf, (unsigned char *) outerr,
                      &data->__statep->__count);
                  if (outbuf != outerr || again != RES_FULL)
                    return __GCONV_INTERNAL_ERROR;
                  if (outbuf == outstart)
                    --data->__invocation_counter;
                }
              status = result;
            }
          else if (status == __GCONV_FULL_OUTPUT)
            {
              status = __GCONV_OK;
              outbuf = data->__outbuf;
            }
        }

      if (status != __GCONV_OK)
        break;

      outbuf = data->__outbuf;
    }

  return status;
}
