" Corrected UTF-8 in Vim, through glibc's iconv and the CORRECTED-UTF-8
" gconv module (GCONV_PATH must name its directory, see docs/charset.md).
"   :source PREFIX/share/cutf8fs/corrected-utf-8.vim   (or put it in vimrc)
" 1. A file that begins with the magic number is read as corrected-utf-8
"    (iconv drops the magic number), so :e notes.txt just works; on any
"    other file, :e ++enc=corrected-utf-8 FILE forces it.
" 2. Vim's :w converts the buffer twice on one iconv descriptor (a dry run
"    to find conversion errors, then the write), so the module's magic
"    number lands in the dry run: after writing a corrected-utf-8 buffer,
"    put it back in front of the file (once).
let s:magic = 0zEFB79DED.B2AE000A

function! s:IsCorrected(f) abort
  return filereadable(a:f) && readblob(a:f, 0, 8) == s:magic
endfunction

function! s:AddMagic(f) abort
  let b = readblob(a:f)
  if len(b) < 8 || b[0:7] != s:magic
    call writefile(s:magic + b, a:f)
  endif
endfunction

augroup corrected_utf8
  autocmd!
  autocmd BufReadPre * if s:IsCorrected(expand('<afile>:p'))
        \ | let s:fencs = &fileencodings | set fileencodings=corrected-utf-8 | endif
  autocmd BufReadPost * if exists('s:fencs')
        \ | let &fileencodings = s:fencs | unlet s:fencs | endif
  autocmd BufWritePost * if &fileencoding ==# 'corrected-utf-8'
        \ | call s:AddMagic(expand('<afile>:p')) | endif
augroup END
