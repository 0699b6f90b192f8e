# thx on Debian 12: the same setup script as a bare machine, then a Release build.
FROM debian:bookworm
WORKDIR /thx
COPY . .
RUN ./scripts/setup.sh && rm -rf /var/lib/apt/lists/* \
 && cmake -S . -B build -G Ninja && cmake --build build \
 && ln -s /thx/build/thx /usr/local/bin/thx
ENTRYPOINT ["thx"]
CMD ["--help"]
