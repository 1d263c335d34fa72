# The Debian package (CPack DEB): `bash packaging/build-deb.sh` builds it for the x86-64-v3
# baseline (AVX-512 kernels by runtime dispatch) and writes build-package/octodiff_<version>_amd64.deb.
# Installed: /usr/bin/octodiff and octodiff-cli, the embedded model under /usr/share/octodiff
# (found next to the binaries: ../share/octodiff), a desktop entry that opens PNG images, an
# AppStream metainfo file and the icons.
set(_linux ${CMAKE_CURRENT_LIST_DIR}/linux)
set(OCTODIFF_APP_ID io.github.octodiff.Octodiff)
if(OCTODIFF_BUILD_GUI)
  install(FILES ${_linux}/${OCTODIFF_APP_ID}.desktop DESTINATION share/applications)
  install(FILES ${_linux}/${OCTODIFF_APP_ID}.metainfo.xml DESTINATION share/metainfo)
  install(FILES ${_linux}/icons/octodiff.svg DESTINATION share/icons/hicolor/scalable/apps
          RENAME ${OCTODIFF_APP_ID}.svg)
  foreach(size 48 64 128 256)
    install(FILES ${_linux}/icons/octodiff-${size}.png DESTINATION share/icons/hicolor/${size}x${size}/apps
            RENAME ${OCTODIFF_APP_ID}.png)
  endforeach()
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME octodiff)
set(CPACK_PACKAGE_VENDOR "Octodiff")
set(CPACK_PACKAGE_CONTACT "Octodiff maintainers <maintainers@users.noreply.a-seed-fd301c41.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Stable Diffusion on the CPU, offline: desktop app and command line")
set(CPACK_PACKAGE_DESCRIPTION
  "Octodiff runs Stable Diffusion 1.x/2.x text-to-image, image-to-image and few-step models on an\n\
ordinary CPU without a network connection: up to eight prompts from one seed side by side, seed\n\
comparison, PNG metadata. A small demo model is included.")
set(CPACK_DEBIAN_PACKAGE_SECTION graphics)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/octodiff/octodiff")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)         # octodiff_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)          # Depends: from the binaries' shared libraries
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
include(CPack)
