# comment
EVIL
\x00\xffZ
GET /etc/passwd
