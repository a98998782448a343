"""Strings as the native layer takes them (UTF-8)."""


def utf8(text):
    """`text` (a str) with lone surrogates - undecodable bytes of a path from
    os.fsdecode, or stray escapes - as U+FFFD, instead of a TypeError in the
    native call."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate surrogateescape cannot carry ('\ud800'): each one as U+FFFD
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
